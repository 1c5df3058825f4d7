#!/usr/bin/env bash
# Issue 18's 1 000-image run, as the Windows write-up's: for each image,
# create it, map it (`shoal rbd device map`: an NBD server of its own),
# write and verify a few MiB through NBD (qemu-io pattern write and read),
# unmap and remove it — COUNT images, PARALLEL at a time. Prints min, max,
# mean and total per step beside the write-up's means, and fails on any
# error or on anything left behind (images, data objects, processes,
# mappings).
#
# Usage: bench/rbd_nbd_images.sh [--count N] [--parallel P] [--mib M] [--osds N] [--store mem|block]
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
#   SHOAL_CONF=... uses that cluster instead of starting a `shoal dev` one.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
COUNT=1000 PARALLEL=50 MIB=4 OSDS=3 STORE=block
while [ $# -gt 0 ]; do
  case "$1" in
    --count) COUNT="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    --mib) MIB="$2"; shift 2 ;;
    --osds) OSDS="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    *) echo "usage: $0 [--count N] [--parallel P] [--mib M] [--osds N] [--store mem|block]" >&2; exit 2 ;;
  esac
done
command -v qemu-io >/dev/null || { echo "needs qemu-io (apt-get install qemu-utils)" >&2; exit 2; }
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || (cd "$ROOT" && cargo build --release -p shoal)
OUT="$(mktemp -d "${TMPDIR:-/tmp}/shoal-bench-images.XXXXXX")"
export SHOAL_RBD_RUN_DIR="$OUT/run" SHOAL_RBD_MAPPINGS="$OUT/mappings.json"
OWN_CLUSTER=0
cleanup() {
  "$SHOAL" rbd device unmap --all >/dev/null 2>&1 || true
  if [ "$OWN_CLUSTER" = 1 ]; then "$SHOAL" dev down --dir "$OUT/cluster" --wipe >/dev/null 2>&1 || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT
if [ -z "${SHOAL_CONF:-}" ]; then
  "$SHOAL" dev up --dir "$OUT/cluster" --store "$STORE" --osds "$OSDS" >/dev/null
  export SHOAL_CONF="$OUT/cluster/shoal.conf"
  OWN_CLUSTER=1
  for _ in $(seq 300); do
    "$SHOAL" pg stat 2>/dev/null | grep -q "active+clean" && ! "$SHOAL" pg stat | grep -qE "peering|activating|creating|unknown" && break
    sleep 0.2
  done
fi
PREFIX="nbd1k-$$"
OBJS0=$("$SHOAL" rados -p rbd ls 2>/dev/null | grep -c "^rbd_data\." || true)

# One image's life; prints "step seconds" lines, or "FAIL ..." lines.
one() {
  local i="$1" name="$PREFIX-$1" t0 t1 uri pat
  now() { date +%s.%N; }
  step() { # step NAME CMD...
    local name="$1"; shift
    t0=$(now)
    if ! out=$("$@" 2>&1); then echo "FAIL $name image $i: $out"; return 1; fi
    t1=$(now)
    echo "$name $(echo "$t1 - $t0" | bc)"
  }
  step create "$SHOAL" rbd create "$name" -s 64M || return 0
  t0=$(now)
  if ! uri=$("$SHOAL" rbd device map "$name" --format json 2>&1); then echo "FAIL map image $i: $uri"; return 0; fi
  t1=$(now); echo "map $(echo "$t1 - $t0" | bc)"
  uri=$(echo "$uri" | sed -n 's/.*"uri":"\([^"]*\)".*/\1/p')
  pat=$(( (i % 250) + 1 ))
  step io qemu-io -f raw -c "write -P $pat 0 ${MIB}M" -c "read -P $pat 0 ${MIB}M" "$uri" || true
  step unmap "$SHOAL" rbd device unmap "$name" || true
  step remove "$SHOAL" rbd rm "$name" || true
}
export -f one
export SHOAL PREFIX MIB

echo "$COUNT images, $PARALLEL at a time, $MIB MiB written and verified through NBD each"
T0=$(date +%s.%N)
seq "$COUNT" | xargs -P "$PARALLEL" -I{} bash -c 'one {}' > "$OUT/steps.txt"
T1=$(date +%s.%N)
WALL=$(echo "$T1 - $T0" | bc)

FAILS=$(grep -c '^FAIL' "$OUT/steps.txt" || true)
grep '^FAIL' "$OUT/steps.txt" | head -5 >&2 || true
# The write-up's means (Ceph's rbd-wnbd, 1 000 images, 50 at a time).
awk -v wall="$WALL" -v count="$COUNT" '
  BEGIN { ref["create"]=0.66; ref["map"]=2.8; ref["io"]=-1; ref["unmap"]=1.0; ref["remove"]=0.98 }
  $1 != "FAIL" { n[$1]++; s[$1]+=$2; if (!($1 in mn) || $2<mn[$1]) mn[$1]=$2; if ($2>mx[$1]) mx[$1]=$2 }
  END {
    printf "%-8s %6s %9s %9s %9s %10s %14s\n", "step", "count", "min s", "max s", "mean s", "total s", "write-up mean"
    split("create map io unmap remove", order, " ")
    for (k = 1; k <= 5; k++) { st = order[k]; if (!(st in n)) continue
      r = (ref[st] < 0) ? "-" : sprintf("%.2f s", ref[st])
      printf "%-8s %6d %9.3f %9.3f %9.3f %10.1f %14s\n", st, n[st], mn[st], mx[st], s[st]/n[st], s[st], r }
    printf "whole run: %.1f s for %d images (write-up: 283.5 s for 1000)\n", wall, count
  }' "$OUT/steps.txt"

# Nothing left behind.
LEFT=$("$SHOAL" rbd ls | grep -c "^$PREFIX-" || true)
OBJS=$(( $("$SHOAL" rados -p rbd ls 2>/dev/null | grep -c "^rbd_data\." || true) - OBJS0 ))
MAPS=$("$SHOAL" rbd device list --format json | { grep -o '"image"' || true; } | wc -l)
PROCS=$({ pgrep -f "nbd serve .*--export rbd/$PREFIX-" || true; } | wc -l)
echo "left behind: $LEFT images, $OBJS data objects, $MAPS mappings, $PROCS servers; $FAILS failures"
[ "$FAILS" = 0 ] && [ "$LEFT" = 0 ] && [ "$OBJS" = 0 ] && [ "$MAPS" = 0 ] && [ "$PROCS" = 0 ]
