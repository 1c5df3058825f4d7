#!/usr/bin/env bash
# bench/r2-rounds.sh BIN [ROUNDS] [SECS] [STORE]: R1 (4 MiB writes, 16 in
# flight) for SECS seconds on a fresh 3-OSD dev cluster (BlockStore unless
# STORE=mem), then R2 (4 MiB random reads, 16 in flight) ROUNDS times over
# those objects; prints each round's MB/s, the OSDs' CPU and the client's
# CPU per read. With perf present, osd.0 (/tmp/perf.r2.osd.data) and the
# client (/tmp/perf.r2.client.data) are profiled in the last round (PERF=0:
# never).
set -euo pipefail
BIN="$1"; ROUNDS="${2:-3}"; SECS="${3:-15}"; STORE="${4:-block}"
DIR=$(mktemp -d /tmp/r2-rounds.XXXX)
HZ=$(getconf CLK_TCK)
cleanup() { "$BIN" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT
"$BIN" dev up --dir "$DIR" --store "$STORE" --osds 3 --osd-bytes $((8 << 30)) >/dev/null
cpu_of() { awk -v hz=$HZ '{sub(/.*\) /,""); printf "%.3f\n", ($12+$13)/hz}' "/proc/$1/stat"; }
osd_cpu() { for f in "$DIR"/run/osd*.pid; do cpu_of "$(cat "$f")"; done | awk '{t+=$1} END{print t}'; }
"$BIN" --conf "$DIR/shoal.conf" bench -p rbd "$SECS" write -t 16 --no-cleanup --format json >/dev/null
P0=$(cat "$DIR"/run/osd.0.pid)
for r in $(seq 1 "$ROUNDS"); do
  b=$(osd_cpu)
  # The client's CPU: its own /proc entry, read just before it exits.
  "$BIN" --conf "$DIR/shoal.conf" bench -p rbd "$SECS" rand -t 16 --format json > "$DIR/out.json" &
  C=$!
  if [ "${PERF:-1}" = 1 ] && command -v perf >/dev/null && [ "$r" = "$ROUNDS" ]; then
    (sleep 3; perf record -g -F 499 -p $P0 -o /tmp/perf.r2.osd.data -- sleep 6 >/dev/null 2>&1) &
    (sleep 3; perf record --call-graph dwarf,16384 -F 199 -p $C -o /tmp/perf.r2.client.data -- sleep 6 >/dev/null 2>&1) &
  fi
  cc=0
  while kill -0 $C 2>/dev/null; do
    c=$(cpu_of $C 2>/dev/null) && cc=$c
    sleep 0.2
  done
  wait
  a=$(osd_cpu)
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); o=float(sys.argv[3])-float(sys.argv[2]); c=float(sys.argv[4]); n=max(j['ops'],1); print(f'round $r: {j[\"bandwidth_mb_s\"]:.0f} MB/s, {n} reads, OSD CPU {o*1e3/n:.2f} ms/read, client CPU {c*1e3/n:.2f} ms/read')" "$DIR/out.json" "$b" "$a" "$cc"
done
