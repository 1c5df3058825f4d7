#!/usr/bin/env bash
# The balancer on OSDs of unequal size (issue 47): a `shoal dev up` cluster
# of four memory-store OSDs, two of SMALL bytes and two of twice that, their
# CRUSH weights by capacity (TiB, as a new OSD of that size gets); pool rbd
# filled to about half the raw space; then each OSD's utilization (`osd df`)
# and the fullest over the emptiest, and the PG copies' spread (`balancer
# eval`), before and after `shoal balancer on` has brought every OSD within
# one PG copy of its share. Prints one JSON line per phase and a summary.
#
# Usage: bench/balancer.sh [SMALL_GIB]      (default 1: 6 GiB raw, 1 GiB of data)
#   SHOAL=path/to/shoal (default target/release/shoal, else target/debug/shoal)
# Bounded: every wait has a deadline; the cluster is stopped on exit.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHOAL="${SHOAL:-}"
if [ -z "$SHOAL" ]; then
  SHOAL="$ROOT/target/release/shoal"
  [ -x "$SHOAL" ] || SHOAL="$ROOT/target/debug/shoal"
fi
SMALL=$(( ${1:-1} << 30 ))
BIG=$(( SMALL * 2 ))
DIR="$(mktemp -d "${TMPDIR:-/tmp}/shoal-balancer.XXXXXX")"
cleanup() {
  timeout 60 "$SHOAL" dev down --dir "$DIR" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

wait_for() { # SECONDS DESCRIPTION COMMAND...
  local until=$(( $(date +%s) + $1 )); local what="$2"; shift 2
  until "$@"; do
    [ "$(date +%s)" -lt "$until" ] || { echo "$0: timed out waiting for $what" >&2; exit 1; }
    sleep 1
  done
}
clean() {
  "$SHOAL" pg stat --format json | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(0 if s["num_pgs"] and [x["name"] for x in s["num_pg_by_state"]] == ["active+clean"] else 1)'
}
balanced() {
  clean && "$SHOAL" balancer status --format json | python3 -c '
import json, sys
sys.exit(0 if json.load(sys.stdin)["max_deviation"] <= 1.0 else 1)'
}
phase() { # NAME: one JSON line of the OSDs' utilizations and the spread
  local df ev
  df="$("$SHOAL" osd df --format json)"
  ev="$("$SHOAL" balancer status --format json)"
  python3 - "$1" "$df" "$ev" <<'EOF'
import json, sys
name, df, ev = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
util = {n["name"]: round(n["utilization"], 2) for n in df["nodes"]}
full, empty = max(util.values()), min(util.values())
print(json.dumps({
    "phase": name, "utilization_pct": util,
    "fullest_over_emptiest": round(full / empty, 3) if empty else None,
    "stddev_pct": round(df["summary"]["dev"], 2),
    "pg_copies": {str(o["osd"]): o["pgs"] for o in ev["osds"]},
    "pg_max_deviation": round(ev["max_deviation"], 2),
    "pg_upmap_items": ev["pg_upmap_items"],
}))
EOF
}

echo "==> 4 memory-store OSDs: osd.0, osd.1 of $SMALL bytes, osd.2, osd.3 of $BIG ($DIR)" >&2
timeout 300 "$SHOAL" --set osd_store_bytes="$SMALL" --set osd_pg_stats_interval_ms=1000 \
  dev up --dir "$DIR" --osds 4 --store mem --no-gateway >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
timeout 60 "$SHOAL" dev down --dir "$DIR" >/dev/null
printf '\n[osd.2]\nosd_store_bytes = %s\n\n[osd.3]\nosd_store_bytes = %s\n' "$BIG" "$BIG" \
  >>"$DIR/shoal.conf"
# Restarted, the memory stores come back empty at their sizes; CRUSH
# weighs each by its capacity.
timeout 300 "$SHOAL" dev up --dir "$DIR" >/dev/null
for o in 0 1 2 3; do
  bytes=$SMALL; [ "$o" -ge 2 ] && bytes=$BIG
  "$SHOAL" osd crush reweight "osd.$o" "$(python3 -c "print($bytes / 2**40)")" >/dev/null
done
# On by default: off until the data is in, so "before" is CRUSH's alone.
"$SHOAL" balancer off >/dev/null
wait_for 120 "a clean cluster" clean

# Half the raw space: raw = 6 SMALL, three copies.
objects=$(( SMALL * 6 / 2 / 3 / (4 << 20) ))
echo "==> writing $objects objects of 4 MiB" >&2
timeout 900 "$SHOAL" bench -p rbd 900 write --no-cleanup --max-objects "$objects" >/dev/null
wait_for 120 "PG statistics of the data" clean
sleep 3   # the OSDs' space reports
phase before

echo "==> balancer on" >&2
"$SHOAL" config set mon mon_balancer_interval_ms 1000 >/dev/null
"$SHOAL" balancer on >/dev/null
wait_for 600 "every OSD within one PG copy of its share, clean" balanced
sleep 3
phase after
sleep 30
phase settled
