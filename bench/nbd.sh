#!/usr/bin/env bash
# Issue 18's fio rows (BENCHMARKS.md B1 and B2) through NBD: fio's nbd
# engine against `shoal nbd serve` exporting an image of a fresh `shoal dev
# up` cluster (3 OSDs, replicated size 3); beside it, in the same run, the
# loopback limit of an NBD read path (fio against qemu-nbd serving a file in
# /dev/shm), and, when a Ceph cluster is reachable (CEPH_CONF, as
# ../shared/bench/ceph/setup.sh makes one), fio's rbd engine on Ceph and
# fio's nbd engine against qemu-nbd exporting the Ceph image. Each row shows
# IOPS, bandwidth, mean completion latency and the CPU seconds of the
# daemons and the NBD server (per op, too).
#
# Usage: bench/nbd.sh [--store mem|block] [--secs S] [--image-gib G]
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
STORE=mem SECS=15 IMAGE_GIB=2
while [ $# -gt 0 ]; do
  case "$1" in
    --store) STORE="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --image-gib) IMAGE_GIB="$2"; shift 2 ;;
    *) echo "usage: $0 [--store mem|block] [--secs S] [--image-gib G]" >&2; exit 2 ;;
  esac
done
for t in fio qemu-nbd; do command -v $t >/dev/null || { echo "needs $t" >&2; exit 2; }; done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || (cd "$ROOT" && cargo build --release -p shoal)
OUT="$(mktemp -d "${TMPDIR:-/tmp}/shoal-bench-nbd.XXXXXX")"
DIR="$OUT/cluster"
CLK_TCK=$(getconf CLK_TCK)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -f /dev/shm/shoal-bench-nbd-$$.img
  rm -rf "$OUT"
}
trap cleanup EXIT

cpu_of() { # total CPU seconds of the processes whose command line matches $1
  local t=0
  for p in $(pgrep -f "$1" || true); do
    [ -r /proc/$p/stat ] || continue
    t=$(awk -v t="$t" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%.2f", t + ($12+$13)/hz}' /proc/$p/stat)
  done
  echo "$t"
}

# row NAME DAEMON_PATTERN FIO_ARGS...: runs fio, prints one line.
row() {
  local name="$1" pat="$2"; shift 2
  local c0 c1 json
  c0=$(cpu_of "$pat")
  json=$(fio --output-format=json --group_reporting --time_based --runtime="$SECS" --ramp_time=2 --name=j "$@" 2>/dev/null)
  c1=$(cpu_of "$pat")
  echo "$json" | python3 -c '
import json, sys
text = sys.stdin.read()  # fio'"'"'s nbd engine prints a line before the JSON
j = json.loads(text[text.index("{"):])["jobs"][0]
name, cpu = sys.argv[1], float(sys.argv[2])
for d in ("read", "write"):
    x = j[d]
    if x["io_bytes"] == 0:
        continue
    iops, bw = x["iops"], x["bw_bytes"] / 1e6
    lat = x["clat_ns"]["mean"] / 1000
    ops = x["total_ios"] or 1
    print(f"{name:<34} {d:<5} {iops:>10.0f} IOPS {bw:>9.1f} MB/s {lat:>9.0f} us  daemons {cpu:6.2f} s ({cpu*1e6/ops:7.0f} us/op)")
' "$name" "$(echo "$c1 - $c0" | bc)"
}

matrix() { # matrix LABEL DAEMON_PATTERN ENGINE_ARGS...
  local label="$1" pat="$2"; shift 2
  row "$label 4k randwrite qd1"       "$pat" "$@" --bs=4k --rw=randwrite --iodepth=1
  row "$label 4k randwrite qd16x2"    "$pat" "$@" --bs=4k --rw=randwrite --iodepth=16 --numjobs=2
  row "$label 4k randread qd16x2"     "$pat" "$@" --bs=4k --rw=randread --iodepth=16 --numjobs=2
  row "$label 64k randwrite qd16x2"   "$pat" "$@" --bs=64k --rw=randwrite --iodepth=16 --numjobs=2
  row "$label 64k randread qd16x2"    "$pat" "$@" --bs=64k --rw=randread --iodepth=16 --numjobs=2
  row "$label 2M write qd64"          "$pat" "$@" --bs=2M --rw=write --iodepth=64
  row "$label 2M read qd64"           "$pat" "$@" --bs=2M --rw=read --iodepth=64
}

echo "# bench/nbd.sh: $STORE OSDs, ${SECS}s per row, $(date -u +%FT%TZ), commit $(cd "$ROOT" && git rev-parse --short HEAD)"
"$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds 3 --osd-bytes $(((IMAGE_GIB * 3 + 2) << 30)) >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
"$SHOAL" rbd create bench --size "${IMAGE_GIB}G"
"$SHOAL" nbd serve --bind 127.0.0.1:10815 > "$OUT/serve.log" 2>&1 &
PIDS+=($!)
sleep 1
URI="nbd://127.0.0.1:10815/rbd/bench"
# Fill the image first, so reads read data.
fio --name=fill --ioengine=nbd --uri="$URI" --bs=4M --rw=write --iodepth=16 --size="${IMAGE_GIB}G" >/dev/null
matrix "shoal nbd" "$DIR/shoal.conf|nbd serve --bind 127.0.0.1:10815" --ioengine=nbd --uri="$URI"

# The loopback limit of the NBD read path: qemu-nbd serving RAM.
IMG=/dev/shm/shoal-bench-nbd-$$.img
# Allocated (zeros written), so that every read carries its data.
dd if=/dev/zero of="$IMG" bs=4M count=$((IMAGE_GIB * 256)) status=none
qemu-nbd --bind=127.0.0.1 --port=10816 --persistent --shared=8 --format=raw "$IMG" &
PIDS+=($!)
sleep 1
row "loopback (qemu-nbd on tmpfs) 2M read qd64" "qemu-nbd --bind=127.0.0.1 --port=10816" \
  --ioengine=nbd --uri=nbd://127.0.0.1:10816/ --bs=2M --rw=read --iodepth=64

if [ -n "${CEPH_CONF:-}" ] && ceph -s >/dev/null 2>&1; then
  rbd rm rbd/shoalbench >/dev/null 2>&1 || true
  rbd create rbd/shoalbench --size "${IMAGE_GIB}G"
  rbd bench --io-type write --io-size 4M --io-threads 16 --io-total "${IMAGE_GIB}G" --io-pattern seq rbd/shoalbench >/dev/null
  matrix "ceph fio-rbd" "ceph-(osd|mon|mgr)" --ioengine=rbd --clientname=admin --pool=rbd --rbdname=shoalbench --direct=1
  qemu-nbd --bind=127.0.0.1 --port=10817 --persistent --shared=8 --format=raw --cache=none \
    "rbd:rbd/shoalbench:conf=$CEPH_CONF:id=admin" &
  PIDS+=($!)
  sleep 2
  matrix "ceph qemu-nbd" "ceph-(osd|mon|mgr)|qemu-nbd --bind=127.0.0.1 --port=10817" --ioengine=nbd --uri=nbd://127.0.0.1:10817/
  rbd rm rbd/shoalbench >/dev/null 2>&1 || true
else
  echo "(no Ceph cluster: set CEPH_CONF after ../shared/bench/ceph/setup.sh for its rows)"
fi
