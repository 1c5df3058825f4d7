#!/usr/bin/env bash
# Recovery benchmark (BENCHMARKS.md X1, issue 7): a dev cluster of 4
# BlockStore OSDs, pool size 3, ~1 GiB of 4 MiB objects; one OSD is
# SIGKILLed and marked out, and we time the return to active+clean while a
# 4 KiB writer runs. Printed beside the same run's loopback bandwidth
# (iperf3, or raw TCP from `shoal bench net` without it) and raw disk bandwidth (dd to a file in the same
# file system), with the CPU seconds each daemon used.
#
# With --erasure K+M the pool is erasure coded (K+M+1 OSDs, failure domain
# the OSD), and the lost OSD held one shard, 1/K of its PGs' data.
#
# The writer's IOPS during recovery are its per-second figures over the
# seconds from the kill until every PG is active+clean (whole seconds, at
# least one). With --no-writer recovery runs alone; with PERF=1 the OSDs
# are profiled (perf, DWARF stacks) from the kill for PERF_SECS seconds
# (default 3), the report left in $PERF_OUT (default /tmp/recovery.perf).
#
# With --object-size BYTES the pool is filled with objects of that size
# (default 4 MiB: --gib N of them), --objects N of them when given: small
# objects measure what each object costs (a push, a commit, an
# acknowledgement), not bandwidth.
#
# Usage: bench/recovery.sh [--gib N] [--object-size BYTES] [--objects N] [--erasure K+M]
#        [--no-writer] [--set KEY=VALUE]...
#   SHOAL=path/to/shoal (default target/release/shoal); each --set goes into the
#   cluster's configuration (e.g. --set osd_max_backfills=4).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
GIB=1
SETS=()
EC=""
WRITER=1
OBJSIZE=$((4 << 20))
OBJECTS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gib) GIB="$2"; shift 2 ;;
    --erasure) EC="$2"; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --no-writer) WRITER=0; shift ;;
    --object-size) OBJSIZE="$2"; shift 2 ;;
    --objects) OBJECTS="$2"; shift 2 ;;
    *) echo "usage: $0 [--gib N] [--object-size BYTES] [--objects N] [--erasure K+M] [--no-writer] [--set KEY=VALUE]..." >&2; exit 2 ;;
  esac
done
POOL=rbd OSDS=4 K=1
if [ -n "$EC" ]; then
  K="${EC%+*}"; M="${EC#*+}"; POOL=ec OSDS=$((K + M + 1))
fi
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || (cd "$ROOT" && cargo build --release -p shoal)
OUT="${TMPDIR:-/tmp}/shoal-recovery-$$"
DIR="$OUT/cluster"
mkdir -p "$OUT"
CLK_TCK=$(getconf CLK_TCK)
cleanup() { "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; rm -rf "$OUT"; }
trap cleanup EXIT

# Baselines, same run.
DISK_MBS=$(dd if=/dev/zero of="$OUT/dd.bin" bs=4M count=256 oflag=direct 2>&1 | awk '/copied/{print $(NF-1), $NF}')
# Recovery reads every byte on one OSD and writes it on another of the same
# disk: the disk's copy bandwidth (direct reads and writes, 4 MiB) bounds it.
COPY_MBS=$(dd if="$OUT/dd.bin" of="$OUT/dd2.bin" bs=4M iflag=direct oflag=direct 2>&1 | awk '/copied/{print $(NF-1), $NF}')
rm -f "$OUT/dd.bin" "$OUT/dd2.bin"
if command -v iperf3 >/dev/null 2>&1; then
  iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
  sleep 0.5
  LOOP=$(iperf3 -c 127.0.0.1 -p 5299 -t 3 -J | python3 -c 'import json,sys; print("%.0f MB/s" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6))')
else
  # Without iperf3: raw tokio TCP over loopback, 4 MiB messages, 16 in flight.
  LOOP=$("$SHOAL" bench net --only c --rounds 1 --seconds 3 --format json | python3 -c 'import json,sys; print("%.0f MB/s (raw TCP, shoal bench net)" % (json.load(sys.stdin)["raw_tcp"]["inflight16_4m_gb_per_s"]*1000))')
fi

"$SHOAL" "${SETS[@]}" dev up --dir "$DIR" --osds "$OSDS" --store block --osd-bytes $((4 * GIB * 1024 * 1024 * 1024)) >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
if [ -n "$EC" ]; then
  "$SHOAL" osd erasure-code-profile set rec "k=$K" "m=$M" crush-failure-domain=osd >/dev/null
  "$SHOAL" osd pool create ec 32 erasure rec >/dev/null
  "$SHOAL" osd pool set ec allow_ec_overwrites true >/dev/null
  until "$SHOAL" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)'; do sleep 0.5; done
fi
OBJECTS="${OBJECTS:-$((GIB * 1024 * 1024 * 1024 / OBJSIZE))}"
"$SHOAL" bench -p "$POOL" 3600 write -b "$OBJSIZE" -t 16 --no-cleanup --max-objects "$OBJECTS" --format json >/dev/null

# What osd.0 holds: the bytes of the PGs it is in (once the primaries
# have reported the new objects).
sleep 7   # osd_pg_stats_interval_ms is 5 s
read -r BYTES MOVED_OBJECTS < <("$SHOAL" pg dump --format json | python3 -c '
import json,sys
v=json.load(sys.stdin)
pgs=[p for p in v["pg_stats"] if 0 in p.get("acting",[])]
print(sum(p.get("bytes",0) for p in pgs) // '"$K"', sum(p.get("objects",0) for p in pgs))')

base=$("$SHOAL" bench -p "$POOL" 5 write -b 4096 -t 16 --format json)

daemon_cpu() {
  for f in "$DIR"/run/*.pid; do
    p=$(cat "$f"); [ -r "/proc/$p/stat" ] || continue
    awk -v n="$(basename "$f" .pid)" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%s %.2f\n", n, ($12+$13)/hz}' "/proc/$p/stat"
  done
}
before="$(daemon_cpu)"
kill -KILL "$(cat "$DIR/run/osd.0.pid")"
"$SHOAL" osd out 0 >/dev/null
t0=$(date +%s.%N)
BENCH=""
if [ "$WRITER" = 1 ]; then
  # Plain output: one line per second, its sixth column the MB of that second.
  "$SHOAL" bench -p "$POOL" 20 write -b 4096 -t 16 > "$OUT/during.txt" 2> "$OUT/during.err" &
  BENCH=$!
fi
if [ "${PERF:-0}" = 1 ]; then
  OSD_PIDS=$(for f in "$DIR"/run/osd.*.pid; do p=$(cat "$f"); [ -d "/proc/$p" ] && echo "$p"; done | paste -sd,)
  perf record -F "${PERF_HZ:-499}" --call-graph dwarf,16384 -p "$OSD_PIDS" -o "$OUT/perf.data" -- sleep "${PERF_SECS:-3}" >/dev/null 2>&1 &
  PERFP=$!
fi
# When the monitors mark the killed OSD down (its peers report it as soon as
# its connections reset and a new one is refused).
(for _ in $(seq 1 200); do
  if "$SHOAL" osd dump --format json | python3 -c '
import json,sys
v=json.load(sys.stdin)
sys.exit(0 if any(o["osd"]==0 and not o.get("up") for o in v["osds"]) else 1)'; then
    date +%s.%N > "$OUT/down_at"; break
  fi
  sleep 0.1
done) &
DOWNW=$!
while ! "$SHOAL" pg stat --format json | python3 -c '
import json,sys
v=json.load(sys.stdin)
c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean")
sys.exit(0 if c==v["num_pgs"] else 1)'; do
  sleep 0.2
done
t1=$(date +%s.%N)
after="$(daemon_cpu)"
wait "$DOWNW" 2>/dev/null || true
tdown=$(cat "$OUT/down_at" 2>/dev/null || echo "$t1")
if [ "${PERF:-0}" = 1 ]; then
  wait "$PERFP" || true
  perf report -i "$OUT/perf.data" --no-children --percent-limit 0.7 --stdio > "${PERF_OUT:-/tmp/recovery.perf}" 2>/dev/null || true
  mv "$OUT/perf.data" "${PERF_OUT:-/tmp/recovery.perf}.data"
fi
if [ -n "$BENCH" ] && ! wait "$BENCH"; then
  # A write that fails (or times out) through an OSD loss is a bug, not a
  # figure: say so and stop.
  echo "recovery.sh: the 4 KiB writer failed during recovery:" >&2
  cat "$OUT/during.err" >&2
  exit 1
fi
CPU=$(join <(echo "$before" | sort) <(echo "$after" | sort) | awk '{printf "%s %.1f s, ", $1, $3-$2}')

python3 - "$t0" "$t1" "$BYTES" "$base" "$OUT/during.txt" "$DISK_MBS" "$LOOP" "$CPU" "$tdown" "$COPY_MBS" "$MOVED_OBJECTS" "$OBJSIZE" <<'EOF'
import json, sys
t0, t1, moved = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
base = json.loads(sys.argv[4])
secs = t1 - t0
# The writer's seconds that overlap the recovery.
per_s = []
try:
    for line in open(sys.argv[5]):
        f = line.split()
        if len(f) >= 6 and f[0].isdigit():
            per_s.append(float(f[5]) * 1e6 / 4096)
except OSError:
    pass
n = max(1, int(secs + 0.999))
during = sum(per_s[:n]) / len(per_s[:n]) if per_s else None
print("| figure | value |")
print("|---|---|")
objects = int(sys.argv[11])
print(f"| data on the lost OSD's PGs | {moved/2**20:.0f} MiB, {objects} objects of {int(sys.argv[12])} bytes |")
tdown = float(sys.argv[9])
print(f"| time to active+clean after kill + out | {secs:.1f} s |")
print(f"| of which until the killed OSD is marked down | {tdown - t0:.1f} s |")
print(f"| recovery throughput | {moved/secs/1e6:.1f} MB/s |")
print(f"| recovery throughput once it is down | {moved/max(t1 - tdown, 1e-3)/1e6:.1f} MB/s, {objects/max(t1 - tdown, 1e-3):.0f} objects/s |")
print(f"| 4 KiB write IOPS before | {base.get('iops', 0):.0f} |")
if during is None:
    print("| 4 KiB write IOPS during recovery | (no writer) |")
else:
    print(f"| 4 KiB write IOPS during recovery (its first {n} s from the kill) | {during:.0f} ({during / max(base.get('iops', 1), 1) * 100:.0f} %) |")
print(f"| raw disk, dd 4 MiB direct writes | {sys.argv[6]} |")
print(f"| raw disk, dd copy of 1 GiB, 4 MiB direct reads and writes | {sys.argv[10]} |")
print(f"| loopback TCP, one stream | {sys.argv[7]} |")
print(f"| daemon CPU during recovery | {sys.argv[8].rstrip(', ')} |")
EOF
