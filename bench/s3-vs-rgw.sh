#!/usr/bin/env bash
# BENCHMARKS.md's S1 side by side in one run: radosgw (Ceph 16, memstore
# OSDs, set up by ../shared/bench/ceph/setup.sh) and then `shoal gateway`
# (a `shoal dev up` cluster, mem store), each measured by the same clients:
# `shoal bench s3` (Rust, SigV4, keep-alive; what the gateway costs rather
# than what boto3 costs) and BENCHMARKS.md's s3bench.py (boto3). Rows:
# 2 000 x 4 KiB, 200 x 4 MiB, 8 x 64 MiB (multipart, 8 MiB parts), 8 in
# flight. Each side runs alone on the machine; everything is stopped at
# the end, even on failure.
#
# Needs root and Debian's ceph, ceph-mon, ceph-osd, ceph-mgr and radosgw.
# Usage: bench/s3-vs-rgw.sh [--scale F] [--only rust|boto3]
#   SHOAL=path/to/shoal (default: target/release/shoal)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CEPH_DIR="${CEPH_DIR:-$ROOT/../shared/bench/ceph}"
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
SCALE=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) SCALE="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "usage: $0 [--scale F] [--only rust|boto3]" >&2; exit 2 ;;
  esac
done
[ -x "$SHOAL" ] || { echo "$0: build first: cargo build --release -p shoal" >&2; exit 1; }
command -v radosgw >/dev/null || { echo "$0: radosgw is not installed (apt-get install ceph ceph-mon ceph-osd ceph-mgr radosgw)" >&2; exit 1; }
export RUN="${RUN:-/tmp/ceph-bench}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shoal-s3-vs-rgw.XXXXXX")"
DIR="$WORK/cluster"
cleanup() {
  "$CEPH_DIR/teardown.sh" --purge >/dev/null 2>&1 || true
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

rows() {
  for row in "4K 2000 4096" "4M 200 4194304" "64M 8 67108864"; do
    set -- $row
    echo "$1 $(python3 -c "print(max(1, int($2 * $SCALE)))") $3"
  done
}

# measure NAME ENDPOINT KEY SECRET PID
measure() {
  local name="$1" ep="$2" key="$3" secret="$4" pid="$5"
  rows | while read -r size count bytes; do
    if [ "$ONLY" != boto3 ]; then
      echo "== $name, shoal bench s3, $count x $size"
      timeout 900 "$SHOAL" bench s3 --endpoint "$ep" --access-key "$key" --secret-key "$secret" \
        --size "$size" --count "$count" --threads 8 --gateway-pid "$pid" --bucket "rs-$name-$bytes" \
        | tail -n 4
    fi
    if [ "$ONLY" != rust ]; then
      echo "== $name, s3bench.py (boto3), $count x $size"
      timeout 900 python3 "$CEPH_DIR/s3bench.py" --endpoint "$ep" --key "$key" --secret "$secret" \
        --bucket "py-$name-$bytes" --size "$bytes" --count "$count" --threads 8 | grep SUMMARY || true
    fi
  done
}

echo "# $(date -u +%FT%TZ) $(git -C "$ROOT" rev-parse --short HEAD), $(nproc) cores, scale $SCALE"
echo "## radosgw (Ceph $(ceph --version | awk '{print $3}'), memstore, 3 OSDs)"
"$CEPH_DIR/teardown.sh" --purge >/dev/null 2>&1 || true
"$CEPH_DIR/setup.sh" memstore --rgw > "$WORK/ceph-setup.log" 2>&1 || { tail -20 "$WORK/ceph-setup.log"; exit 1; }
export CEPH_CONF="$RUN/ceph.conf"
radosgw-admin user create --uid=bench --display-name=bench --access-key=BENCHKEY --secret=BENCHSECRET >/dev/null
for i in $(seq 1 60); do curl -sf -o /dev/null http://127.0.0.1:7480/ && break; sleep 1; done
measure rgw http://127.0.0.1:7480 BENCHKEY BENCHSECRET "$(cat "$RUN/pid/client.rgw.a.pid")"
"$CEPH_DIR/teardown.sh" --purge >/dev/null 2>&1 || true

echo "## shoal gateway (mem store, 3 OSDs)"
"$SHOAL" dev up --dir "$DIR" --store mem --osds 3 >/dev/null
KEY="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["access_key"])' "$DIR/gateway/user.json")"
SECRET="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["secret_key"])' "$DIR/gateway/user.json")"
measure shoal "http://$(cat "$DIR/gateway/addr")" "$KEY" "$SECRET" "$(cat "$DIR/run/gateway.pid")"
