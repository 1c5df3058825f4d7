#!/usr/bin/env bash
# BENCHMARKS.md's S1 against `shoal gateway`: PUT, GET and DELETE of
# 2 000 × 4 KiB, 200 × 4 MiB and 8 × 64 MiB (multipart) objects with 8 threads,
# through ../shared/bench/ceph/s3bench.py (boto3) — the same script radosgw's
# baseline comes from — on a fresh `shoal dev up` cluster with its gateway,
# printing the gateway's CPU per operation beside each row.
#
# Usage: bench/s3.sh [--store mem|block] [--scale F]
#   --scale: multiply the object counts (0.25 for a quick look)
#   SHOAL=path/to/shoal (default: target/release/shoal)
#   S3BENCH=path/to/s3bench.py (default: ../shared/bench/ceph/s3bench.py)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
STORE=mem
SCALE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --store) STORE="$2"; shift 2 ;;
    --scale) SCALE="$2"; shift 2 ;;
    *) echo "usage: $0 [--store mem|block] [--scale F]" >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
S3BENCH="${S3BENCH:-$ROOT/../shared/bench/ceph/s3bench.py}"
[ -x "$SHOAL" ] || { echo "$0: build first: cargo build --release -p shoal" >&2; exit 1; }
[ -f "$S3BENCH" ] || { echo "$0: no s3bench.py at $S3BENCH" >&2; exit 1; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shoal-s3bench.XXXXXX")"
DIR="$WORK/cluster"
cleanup() {
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds 3 --osd-bytes $((8 << 30)) >/dev/null
ADDR="$(cat "$DIR/gateway/addr")"
KEY="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["access_key"])' "$DIR/gateway/user.json")"
SECRET="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["secret_key"])' "$DIR/gateway/user.json")"
GW_PID="$(cat "$DIR/run/gateway.pid")"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
daemons_cpu() {
  local t=0
  for f in "$DIR"/run/*.pid; do t=$((t + $(cpu "$(cat "$f")"))); done
  echo "$t"
}
hz="$(getconf CLK_TCK)"
echo "store $STORE, $(git -C "$ROOT" rev-parse --short HEAD), gateway http://$ADDR"
for row in "4096 2000" "4194304 200" "67108864 8"; do
  set -- $row
  size="$1"
  count="$(python3 -c "print(max(1, int($2 * $SCALE)))")"
  g0="$(cpu "$GW_PID")"; d0="$(daemons_cpu)"
  python3 "$S3BENCH" --endpoint "http://$ADDR" --key "$KEY" --secret "$SECRET" \
    --bucket "b$size" --size "$size" --count "$count" --threads 8 | grep SUMMARY
  g1="$(cpu "$GW_PID")"; d1="$(daemons_cpu)"
  python3 -c "
g=($g1-$g0)/$hz; d=($d1-$d0)/$hz; n=3*$count
print(f'  gateway CPU {g:.2f} s ({g/n*1e6:.0f} us per op over PUT+GET+DELETE), all daemons {d:.2f} s')"
done
