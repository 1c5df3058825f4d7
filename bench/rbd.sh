#!/usr/bin/env bash
# Issue 17's block rows: `shoal rbd bench` against a fresh `shoal dev up`
# cluster of N OSDs, on an image in the replicated pool `rbd` and on one
# whose data lives in an EC K+M pool (failure domain: the OSD): 4 MiB
# sequential writes (which also fill the image), 4 KiB random writes and
# reads at 16 in flight, 4 MiB sequential reads, with the daemons' CPU
# seconds beside each. When a Ceph cluster is reachable (CEPH_CONF set, as
# ../shared/bench/ceph/setup.sh makes one with NUM_OSD=N; EC data pools
# need its bluestore OSDs) the same rows run with Ceph's `rbd bench` on the
# same pools, in the same run.
#
# Usage: bench/rbd.sh [--osds N] [--k K] [--m M] [--store mem|block] [--image-gib G] [--small-mib S]
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OSDS=4 K=3 M=1 STORE=block IMAGE_GIB=1 SMALL_MIB=64
while [ $# -gt 0 ]; do
  case "$1" in
    --osds) OSDS="$2"; shift 2 ;;
    --k) K="$2"; shift 2 ;;
    --m) M="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --image-gib) IMAGE_GIB="$2"; shift 2 ;;
    --small-mib) SMALL_MIB="$2"; shift 2 ;;
    *) echo "usage: $0 [--osds N] [--k K] [--m M] [--store mem|block] [--image-gib G] [--small-mib S]" >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || (cd "$ROOT" && cargo build --release -p shoal)
OUT="${TMPDIR:-/tmp}/shoal-bench-rbd-$$"
DIR="$OUT/cluster"
RESULTS="$OUT/results.jsonl"
mkdir -p "$OUT"; : > "$RESULTS"
CLK_TCK=$(getconf CLK_TCK)
cleanup() { "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds "$OSDS" --osd-bytes $(((IMAGE_GIB * 2 + 2) << 30)) >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
"$SHOAL" osd erasure-code-profile set bench "k=$K" "m=$M" crush-failure-domain=osd >/dev/null
"$SHOAL" osd pool create ec 32 erasure bench >/dev/null
"$SHOAL" osd pool set ec allow_ec_overwrites true >/dev/null
for _ in $(seq 1 90); do
  "$SHOAL" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)' && break
  sleep 1
done
"$SHOAL" rbd create bench --size "${IMAGE_GIB}G"
"$SHOAL" rbd create ecbench --size "${IMAGE_GIB}G" --data-pool ec

cpu_of() { # "name seconds" for each pid file in $1
  for f in "$1"/*.pid; do
    [ -f "$f" ] || continue; p=$(cat "$f"); [ -r "/proc/$p/stat" ] || continue
    awk -v n="$(basename "$f" .pid)" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%s %.3f\n", n, ($12+$13)/hz}' "/proc/$p/stat"
  done
}
delta() { join <(echo "$1" | sort) <(echo "$2" | sort) | awk '{t+=$3-$2} END {printf "%.3f", t}'; }

CEPH=0
if [ -n "${CEPH_CONF:-}" ] && command -v rbd >/dev/null 2>&1 && timeout 10 ceph -s >/dev/null 2>&1; then
  CEPH=1
  CEPH_RUN="$(dirname "$CEPH_CONF")/pid"
  ceph osd pool create shoalrbd 32 32 replicated >/dev/null 2>&1 || true
  ceph osd pool application enable shoalrbd rbd >/dev/null 2>&1 || true
  ceph osd erasure-code-profile set shoalec "k=$K" "m=$M" crush-failure-domain=osd --force >/dev/null 2>&1 || true
  ceph osd pool create shoalecdata 32 32 erasure shoalec >/dev/null 2>&1 || true
  ceph osd pool set shoalecdata allow_ec_overwrites true >/dev/null 2>&1 || true
  ceph osd pool application enable shoalecdata rbd >/dev/null 2>&1 || true
  sleep 5
  rbd rm shoalrbd/bench >/dev/null 2>&1 || true
  rbd rm shoalrbd/ecbench >/dev/null 2>&1 || true
  rbd create --size "${IMAGE_GIB}G" shoalrbd/bench
  if ! rbd create --size "${IMAGE_GIB}G" --data-pool shoalecdata shoalrbd/ecbench 2>/dev/null; then
    echo "ceph: no image on the EC pool (overwrites on EC pools need bluestore OSDs): its rows are Shoal's only" >&2
  fi
fi

row() { # ROW IMAGE ARGS... (both systems)
  local name="$1" image="$2"; shift 2
  local before after json out
  before="$(cpu_of "$DIR/run")"
  json="$("$SHOAL" rbd bench "$image" "$@" --format json)"
  after="$(cpu_of "$DIR/run")"
  echo "{\"system\": \"shoal\", \"row\": \"$name\", \"bench\": $json, \"cpu\": $(delta "$before" "$after")}" >> "$RESULTS"
  if [ "$CEPH" = 1 ] && rbd info "shoalrbd/$image" >/dev/null 2>&1; then
    before="$(cpu_of "$CEPH_RUN")"
    out="$(rbd bench "shoalrbd/$image" "$@" 2>&1)"
    after="$(cpu_of "$CEPH_RUN")"
    # "elapsed: 10   ops: 262144   ops/sec: 25634.53   bytes/sec: 100 MiB/s"
    local iops
    iops="$(echo "$out" | awk '/^elapsed:/ {for (i = 1; i <= NF; i++) if ($i == "ops/sec:") print $(i + 1)}')"
    echo "{\"system\": \"ceph\", \"row\": \"$name\", \"bench\": {\"ops_per_s\": ${iops:-0}}, \"cpu\": $(delta "$before" "$after")}" >> "$RESULTS"
  fi
}

for image in bench ecbench; do
  row "$image-4M-seq-write" "$image" --io-type write --io-size 4M --io-threads 16 --io-total "${IMAGE_GIB}G" --io-pattern seq
  row "$image-4K-rand-write" "$image" --io-type write --io-size 4K --io-threads 16 --io-total "${SMALL_MIB}M" --io-pattern rand
  row "$image-4K-rand-read" "$image" --io-type read --io-size 4K --io-threads 16 --io-total "$((SMALL_MIB * 4))M" --io-pattern rand
  row "$image-4M-seq-read" "$image" --io-type read --io-size 4M --io-threads 16 --io-total "${IMAGE_GIB}G" --io-pattern seq
done
if [ "$CEPH" = 1 ]; then
  rbd rm shoalrbd/bench >/dev/null 2>&1 || true
  rbd rm shoalrbd/ecbench >/dev/null 2>&1 || true
fi

python3 - "$RESULTS" "$K" "$M" "$OSDS" "$STORE" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
k, m, osds, store = sys.argv[2:6]
shoal = {r["row"]: r for r in rows if r["system"] == "shoal"}
ceph = {r["row"]: r for r in rows if r["system"] == "ceph"}
print(f"images on a replicated pool and on an EC {k}+{m} data pool, {osds} OSDs ({store} stores)\n")
print("| row | Shoal IOPS | Shoal MB/s | p50 ms | daemon CPU s | Ceph IOPS | Ceph CPU s | Shoal/Ceph |")
print("|---|---|---|---|---|---|---|---|")
for name, r in shoal.items():
    b = r["bench"]; c = ceph.get(name)
    ci = c["bench"]["ops_per_s"] if c else 0
    ratio = f"{b['ops_per_s'] / ci:.2f}×" if ci else "-"
    print(f"| {name} | {b['ops_per_s']:.0f} | {b['bytes_per_s'] / 1e6:.1f} | {b['latency_p50_s'] * 1e3:.2f} | {r['cpu']:.1f} | "
          f"{f'{ci:.0f}' if c else '-'} | {c['cpu'] if c else '-'} | {ratio} |")
PY
echo
echo "raw results: $RESULTS"
