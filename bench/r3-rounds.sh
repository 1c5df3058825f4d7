#!/usr/bin/env bash
# bench/r3-rounds.sh BIN [ROUNDS] [SECS]: R3 (`shoal bench write -b 4096 -t 16`)
# repeated ROUNDS times on one fresh 3-OSD BlockStore dev cluster, objects
# kept between rounds; prints IOPS and the OSDs' CPU µs per write of each
# round, and records a flat perf profile of osd.0 (when perf is present)
# in round 1 and the last (/tmp/perf.N.data). Shows what changes as the
# cluster ages: object count, scheduled scrubs.
set -euo pipefail
BIN="$1"; ROUNDS="${2:-4}"; SECS="${3:-20}"
DIR=$(mktemp -d /tmp/r3-rounds.XXXX)
HZ=$(getconf CLK_TCK)
cleanup() { "$BIN" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
"$BIN" dev up --dir "$DIR" --store block --osds 3 --osd-bytes $((8 << 30)) >/dev/null
osd_cpu() { for f in "$DIR"/run/osd*.pid; do awk -v hz=$HZ '{sub(/.*\) /,""); t+=($12+$13)/hz} END{printf "%.3f\n", t}' /proc/$(cat $f)/stat; done | awk '{t+=$1} END{print t}'; }
P0=$(cat "$DIR"/run/osd.0.pid)
for r in $(seq 1 "$ROUNDS"); do
  b=$(osd_cpu)
  if command -v perf >/dev/null && { [ "$r" = 1 ] || [ "$r" = "$ROUNDS" ]; }; then (sleep 3; perf record -F 999 -p $P0 -o /tmp/perf.$r.data -- sleep 10 >/dev/null 2>&1) & fi
  j=$("$BIN" --conf "$DIR/shoal.conf" bench -p rbd "$SECS" write -b 4096 -t 16 --no-cleanup --format json)
  wait
  a=$(osd_cpu)
  python3 -c "import json,sys; j=json.loads(sys.argv[1]); c=float(sys.argv[3])-float(sys.argv[2]); print(f'round $r: {j[\"iops\"]:.0f} IOPS, OSD CPU {c:.2f} s, {c*1e6/j[\"ops\"]:.0f} us/write')" "$j" "$b" "$a"
done
