#!/usr/bin/env bash
# Runs the standard object matrix of ../shared/BENCHMARKS.md (R1-R4, and R5
# on a size-1 pool) against a fresh `shoal dev up` cluster, printing a
# markdown table and JSON lines with the CPU seconds every daemon used
# (/proc/PID/stat) beside each figure. When a Ceph cluster is reachable
# (CEPH_CONF set and `rados` present, as ../shared/bench/ceph/setup.sh
# makes one) the same rows run with `rados bench` in the same run, and the
# table shows the ratio Shoal/Ceph.
#
# Usage: bench/cluster.sh [--store mem|block] [--seconds N] [--out DIR] [--osd-gib N]
#                         [--set KEY=VALUE]...
#   --set: a setting of the dev cluster, every daemon and tool
#   (`--set ms_mode=secure`: the whole cluster in secure mode)
#   --osd-gib: each OSD's store size (default 24, sparse files; the R1 and R5
#   rows of 20 s at ~650 MB/s filled 4 GiB BlockStore OSDs, which then
#   refused writes and stopped the run)
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
STORE=mem
SECS=20
OSD_GIB=24
OUT="${TMPDIR:-/tmp}/shoal-bench-$$"
SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --store) STORE="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --osd-gib) OSD_GIB="$2"; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    *) echo "usage: $0 [--store mem|block] [--seconds N] [--out DIR] [--osd-gib N] [--set KEY=VALUE]..." >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
if [ ! -x "$SHOAL" ]; then
  (cd "$ROOT" && cargo build --release -p shoal)
fi
mkdir -p "$OUT"
DIR="$OUT/cluster"
CLK_TCK=$(getconf CLK_TCK)
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"

cleanup() { "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$SHOAL" "${SETS[@]}" dev up --dir "$DIR" --store "$STORE" --osds 3 --osd-bytes $((OSD_GIB << 30)) >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
"$SHOAL" osd pool create one 32 replicated --size 1 --min-size 1 >/dev/null
for i in $(seq 1 60); do
  "$SHOAL" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)' && break
  sleep 1
done

daemon_cpu() { # "name seconds" for each daemon of the dev cluster
  for f in "$DIR"/run/*.pid; do
    p=$(cat "$f"); [ -r "/proc/$p/stat" ] || continue
    awk -v n="$(basename "$f" .pid)" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%s %.3f\n", n, ($12+$13)/hz}' "/proc/$p/stat"
  done
}

ceph_cpu() {
  local run; run="$(dirname "${CEPH_CONF:-/nonexistent}")"
  for f in "$run"/pid/*.pid; do
    [ -f "$f" ] || continue; p=$(cat "$f"); [ -r "/proc/$p/stat" ] || continue
    awk -v n="$(basename "$f" .pid)" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%s %.3f\n", n, ($12+$13)/hz}' "/proc/$p/stat"
  done
}

# run_row ROW POOL ARGS... : one shoal bench run, its figures and daemon CPU as JSON
run_row() {
  local row="$1" pool="$2"; shift 2
  local before after
  before="$(daemon_cpu)"
  local json
  json="$("$SHOAL" bench -p "$pool" "$@" --format json)"
  after="$(daemon_cpu)"
  local cpu
  cpu="$(join <(echo "$before" | sort) <(echo "$after" | sort) | awk '{d=$3-$2; t+=d; printf "\"%s\": %.3f, ", $1, d} END {printf "\"daemons_total\": %.3f", t}')"
  echo "{\"system\": \"shoal\", \"store\": \"$STORE\", \"row\": \"$row\", \"pool\": \"$pool\", \"args\": \"$*\", \"bench\": $json, \"daemon_cpu_s\": {$cpu}}" | tee -a "$RESULTS" >/dev/null
}

# ceph_row ROW POOL ARGS... : the same row with rados bench
ceph_row() {
  local row="$1" pool="$2"; shift 2
  local before after out
  before="$(ceph_cpu)"
  out="$(rados bench -p "$pool" "$@" 2>&1)"
  after="$(ceph_cpu)"
  local cpu
  cpu="$(join <(echo "$before" | sort) <(echo "$after" | sort) | awk '{d=$3-$2; t+=d} END {printf "%.3f", t}')"
  local bw iops lat
  bw="$(echo "$out" | awk -F: '/^Bandwidth \(MB\/sec\)/{gsub(/ /,"",$2); print $2}')"
  iops="$(echo "$out" | awk -F: '/^Average IOPS/{gsub(/ /,"",$2); print $2}')"
  lat="$(echo "$out" | awk -F: '/^Average Latency/{gsub(/ /,"",$2); print $2}')"
  echo "{\"system\": \"ceph\", \"row\": \"$row\", \"pool\": \"$pool\", \"args\": \"$*\", \"bench\": {\"bandwidth_mb_s\": ${bw:-0}, \"iops\": ${iops:-0}, \"latency_avg_s\": ${lat:-0}}, \"daemon_cpu_s\": {\"daemons_total\": $cpu}}" | tee -a "$RESULTS" >/dev/null
}

CEPH=0
if [ -n "${CEPH_CONF:-}" ] && command -v rados >/dev/null 2>&1 && timeout 10 ceph -s >/dev/null 2>&1; then
  CEPH=1
  ceph osd pool create shoalcmp 32 32 replicated >/dev/null 2>&1 || true
  ceph osd pool set shoalcmp size 3 --yes-i-really-mean-it >/dev/null 2>&1 || true
  ceph osd pool create shoalcmp1 32 32 replicated >/dev/null 2>&1 || true
  ceph osd pool set shoalcmp1 size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
fi

row() { # row NAME SHOAL_POOL CEPH_POOL ARGS...
  local name="$1" sp="$2" cp="$3"; shift 3
  run_row "$name" "$sp" "$@"
  if [ "$CEPH" = 1 ]; then ceph_row "$name" "$cp" "$@"; fi
}

row R1 rbd shoalcmp "$SECS" write -t 16 --no-cleanup
row R2-seq rbd shoalcmp "$SECS" seq -t 16
row R2-rand rbd shoalcmp "$SECS" rand -t 16
"$SHOAL" bench cleanup -p rbd >/dev/null
[ "$CEPH" = 1 ] && rados -p shoalcmp cleanup >/dev/null 2>&1 || true
row R3-t16 rbd shoalcmp "$SECS" write -b 4096 -t 16 --no-cleanup
row R4 rbd shoalcmp "$SECS" rand -t 16
"$SHOAL" bench cleanup -p rbd >/dev/null
[ "$CEPH" = 1 ] && rados -p shoalcmp cleanup >/dev/null 2>&1 || true
row R3-t1 rbd shoalcmp "$SECS" write -b 4096 -t 1
row R5-4M one shoalcmp1 "$SECS" write -t 16
row R5-4K one shoalcmp1 "$SECS" write -b 4096 -t 16

python3 - "$RESULTS" "$STORE" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
shoal = {r["row"]: r for r in rows if r["system"] == "shoal"}
ceph = {r["row"]: r for r in rows if r["system"] == "ceph"}
print(f"| row | store | MB/s | IOPS | lat avg ms | lat p99 ms | daemon CPU s | daemon CPU µs/op | client CPU µs/op | Ceph MB/s | Ceph IOPS | Shoal/Ceph |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in shoal.items():
    b = r["bench"]; ops = max(b["ops"], 1)
    cpu = r["daemon_cpu_s"]["daemons_total"]
    c = ceph.get(name)
    cb = c["bench"] if c else None
    ratio = ""
    if cb:
        base = cb["iops"] if "4096" in r["args"] else cb["bandwidth_mb_s"]
        mine = b["iops"] if "4096" in r["args"] else b["bandwidth_mb_s"]
        ratio = f"{mine / base:.2f}×" if base else ""
    print(f"| {name} | {sys.argv[2]} | {b['bandwidth_mb_s']:.1f} | {b['iops']:.0f} | {b['latency_avg_s']*1e3:.2f} | "
          f"{b['latency_p99_s']*1e3:.2f} | {cpu:.1f} | {cpu*1e6/ops:.0f} | {b['client_cpu_us_per_op']:.0f} | "
          f"{cb['bandwidth_mb_s'] if cb else '-'} | {cb['iops'] if cb else '-'} | {ratio or '-'} |")
EOF
echo
echo "raw results: $RESULTS"
