#!/usr/bin/env bash
# What the manager's metrics cost the daemons at BENCHMARKS.md's R3 load
# (4 KiB object writes, 16 in flight), as issue 21 asks (≤ 1 % of daemon
# CPU). Two parts:
#  1. `shoal bench counters`: ns of CPU the data path spends per op on its
#     counters and latency histograms (always on), beside the daemons' CPU
#     per replicated write measured in part 2.
#  2. The same R3 run on fresh `shoal dev up` clusters, alternately with
#     metrics reported and scraped (a manager, reports and /metrics
#     fetched every --period-ms) and
#     without (no manager, no reports); CPU per write from /proc of the
#     OSDs, of the monitor and of the manager apart.
#
# Usage: bench/mgr-cost.sh [--seconds N] [--rounds N] [--store mem|block] [--period-ms N]
#   --period-ms: daemons' report period and Prometheus' scrape interval
#     while metrics are on (default 5000, mgr_stats_period_ms's default)
#   SHOAL=path/to/shoal (default: target/release/shoal)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SECONDS_RUN=20
ROUNDS=3
STORE=mem
PERIOD_MS=5000
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_RUN="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --period-ms) PERIOD_MS="$2"; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--rounds N] [--store mem|block] [--period-ms N]" >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || { echo "$0: build first: cargo build --release -p shoal" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shoal-mgrcost.XXXXXX")"
DIR="$WORK/cluster"
SCRAPER=""
cleanup() {
  [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null || true
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== part 1: shoal bench counters"
"$SHOAL" bench counters

# utime+stime (clock ticks) of the daemons whose pid files match $1 (osd, mon, mgr).
ticks() {
  local total=0
  for f in "$DIR"/run/"$1".*.pid; do
    [ -f "$f" ] || continue
    local pid
    pid="$(cat "$f")"
    [ -r "/proc/$pid/stat" ] || continue
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

HZ="$(getconf CLK_TCK)"
run() {
  local mode="$1"
  if [ "$mode" = on ]; then
    "$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds 3 --no-gateway \
      --set mgr_stats_period_ms="$PERIOD_MS" >/dev/null
    local mgr
    mgr="$(cat "$DIR/mgr.x/addr")"
    local every
    every="$(python3 -c "print($PERIOD_MS / 1000)")"
    ( while :; do curl -s -o /dev/null "http://$mgr/metrics"; sleep "$every"; done ) &
    SCRAPER=$!
  else
    "$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds 3 --no-gateway --no-mgr \
      --set mgr_stats_period_ms=0 >/dev/null
  fi
  export SHOAL_CONF="$DIR/shoal.conf"
  local o0 m0 g0 o1 m1 g1 out
  o0="$(ticks osd)"; m0="$(ticks mon)"; g0="$(ticks mgr)"
  out="$("$SHOAL" bench -p rbd "$SECONDS_RUN" write -b 4096 -t 16 --format json)"
  o1="$(ticks osd)"; m1="$(ticks mon)"; g1="$(ticks mgr)"
  python3 - "$mode" "$out" "$HZ" $((o1 - o0)) $((m1 - m0)) $((g1 - g0)) <<'END'
import json, sys
mode, out, hz = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
osd, mon, mgr = (int(x) / hz * 1e6 / out["ops"] for x in sys.argv[4:7])
print(f"{mode:<4} {round(out['iops']):>7} IOPS   µs of CPU per write: OSDs {osd:6.1f}  "
      f"monitor {mon:5.2f}  manager {mgr:5.2f}  all {osd + mon + mgr:6.1f}")
END
  if [ -n "$SCRAPER" ]; then kill "$SCRAPER" 2>/dev/null || true; SCRAPER=""; fi
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null
}

echo "== part 2: R3 ($SECONDS_RUN s, 4 KiB writes, 16 in flight, $STORE store), metrics off/on (every $PERIOD_MS ms)"
for _ in $(seq "$ROUNDS"); do
  run off
  run on
done
