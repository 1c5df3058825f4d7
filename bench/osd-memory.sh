#!/usr/bin/env bash
# OSD memory under steady small writes (issue 49 point 2's memory goal):
# a dev cluster of 3 BlockStore OSDs and a pool of 32 PGs, `shoal bench
# history` over 2000 objects for SECONDS (default 300), each OSD's RSS
# printed every 30 s. The PG logs and their dups fill in the first minutes
# (osd_pg_log_entries_min / _max, osd_pg_log_dups_max); after that a flat
# line is the goal.
#
# Usage: bench/osd-memory.sh [SECONDS] [--set KEY=VALUE]...
#   SHOAL=path/to/shoal (default target/release/shoal, else target/debug/shoal)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECS=300
if [[ ${1:-} =~ ^[0-9]+$ ]]; then SECS=$1; shift; fi
SHOAL=${SHOAL:-}
if [ -z "$SHOAL" ]; then
  SHOAL="$ROOT/target/release/shoal"
  [ -x "$SHOAL" ] || SHOAL="$ROOT/target/debug/shoal"
fi
DIR=$(mktemp -d /tmp/shoal-osd-memory.XXXXXX)
cleanup() { "$SHOAL" dev down --dir "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
"$SHOAL" dev up --dir "$DIR" --osds 3 --store block "$@" >"$DIR/up.log" 2>&1 \
  || { cat "$DIR/up.log" >&2; exit 1; }
export SHOAL_CONF="$DIR/shoal.conf"
"$SHOAL" osd pool create bench 32 >/dev/null
"$SHOAL" bench -p bench history "$SECS" --objects 2000 >"$DIR/history.log" 2>&1 &
bench=$!
rss() {
  for f in "$DIR"/run/osd.*.pid; do
    awk '/VmRSS/ { printf " %d", $2 / 1024 }' "/proc/$(cat "$f")/status" 2>/dev/null
  done
}
t=0
while kill -0 $bench 2>/dev/null; do
  echo "t=${t}s OSD RSS (MiB):$(rss)"
  sleep 30
  t=$((t + 30))
done
wait $bench || { cat "$DIR/history.log" >&2; exit 1; }
echo "t=${t}s OSD RSS (MiB):$(rss)"
cat "$DIR/history.log"
