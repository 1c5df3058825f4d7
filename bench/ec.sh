#!/usr/bin/env bash
# Issue 16's erasure-coding rows against a fresh `shoal dev up` cluster of
# N OSDs, with an EC pool of profile K+M (failure domain: the OSD) and a
# replicated size-2 pool for the CPU comparison: 4 MiB writes and reads
# (R6 is 2+1 on 3 OSDs; the write-up's profile 3+1 on 4), 4 KiB writes,
# 4 KiB random overwrites inside the written 4 MiB objects (on Ceph: `rbd
# bench` random writes to a prefilled image whose data pool is the EC
# pool), and the daemons' CPU seconds per GB written beside each. When a Ceph
# cluster is reachable (CEPH_CONF set, as ../shared/bench/ceph/setup.sh
# makes one with NUM_OSD=N) the same rows run with `rados bench` on a Ceph
# EC pool of the same profile, in the same run.
#
# Usage: bench/ec.sh [--osds N] [--k K] [--m M] [--store mem|block] [--seconds S] [--osd-gib G]
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
OSDS=3 K=2 M=1 STORE=mem SECS=15 OSD_GIB=4
while [ $# -gt 0 ]; do
  case "$1" in
    --osds) OSDS="$2"; shift 2 ;;
    --k) K="$2"; shift 2 ;;
    --m) M="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --osd-gib) OSD_GIB="$2"; shift 2 ;;
    *) echo "usage: $0 [--osds N] [--k K] [--m M] [--store mem|block] [--seconds S] [--osd-gib G]" >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
[ -x "$SHOAL" ] || (cd "$ROOT" && cargo build --release -p shoal)
OUT="${TMPDIR:-/tmp}/shoal-bench-ec-$$"
DIR="$OUT/cluster"
RESULTS="$OUT/results.jsonl"
mkdir -p "$OUT"; : > "$RESULTS"
CLK_TCK=$(getconf CLK_TCK)
cleanup() { "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds "$OSDS" --osd-bytes $((OSD_GIB << 30)) >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
"$SHOAL" osd erasure-code-profile set bench "k=$K" "m=$M" crush-failure-domain=osd >/dev/null
"$SHOAL" osd pool create ec 32 erasure bench >/dev/null
"$SHOAL" osd pool set ec allow_ec_overwrites true >/dev/null
"$SHOAL" osd pool create rep2 32 replicated --size 2 --min-size 1 >/dev/null
for _ in $(seq 1 90); do
  "$SHOAL" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)' && break
  sleep 1
done

cpu_of() { # "name seconds" for each pid file in $1
  for f in "$1"/*.pid; do
    [ -f "$f" ] || continue; p=$(cat "$f"); [ -r "/proc/$p/stat" ] || continue
    awk -v n="$(basename "$f" .pid)" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%s %.3f\n", n, ($12+$13)/hz}' "/proc/$p/stat"
  done
}
delta() { join <(echo "$1" | sort) <(echo "$2" | sort) | awk '{t+=$3-$2} END {printf "%.3f", t}'; }

shoal_row() { # ROW POOL ARGS...
  local row="$1" pool="$2"; shift 2
  local before after json
  before="$(cpu_of "$DIR/run")"
  json="$("$SHOAL" bench -p "$pool" "$@" --format json)"
  after="$(cpu_of "$DIR/run")"
  echo "{\"system\": \"shoal\", \"row\": \"$row\", \"args\": \"$*\", \"bench\": $json, \"cpu\": $(delta "$before" "$after")}" >> "$RESULTS"
}

CEPH=0
if [ -n "${CEPH_CONF:-}" ] && command -v rados >/dev/null 2>&1 && timeout 10 ceph -s >/dev/null 2>&1; then
  CEPH=1
  CEPH_RUN="$(dirname "$CEPH_CONF")/pid"
  ceph osd erasure-code-profile set shoalec "k=$K" "m=$M" crush-failure-domain=osd --force >/dev/null 2>&1 || true
  ceph osd pool create shoalec 32 32 erasure shoalec >/dev/null 2>&1 || true
  ceph osd pool set shoalec allow_ec_overwrites true >/dev/null 2>&1 || true
  ceph osd pool create shoalrep2 32 32 replicated >/dev/null 2>&1 || true
  ceph osd pool set shoalrep2 size 2 --yes-i-really-mean-it >/dev/null 2>&1 || true
  ceph osd pool application enable shoalrep2 rbd >/dev/null 2>&1 || true
  ceph osd pool application enable shoalec rbd >/dev/null 2>&1 || true
  sleep 5
fi

ceph_row() { # ROW POOL ARGS...
  local row="$1" pool="$2"; shift 2
  local before after out bw iops
  before="$(cpu_of "$CEPH_RUN")"
  out="$(rados bench -p "$pool" "$@" 2>&1)"
  after="$(cpu_of "$CEPH_RUN")"
  bw="$(echo "$out" | awk -F: '/^Bandwidth \(MB\/sec\)/{gsub(/ /,"",$2); print $2}')"
  iops="$(echo "$out" | awk -F: '/^Average IOPS/{gsub(/ /,"",$2); print $2}')"
  echo "{\"system\": \"ceph\", \"row\": \"$row\", \"args\": \"$*\", \"bench\": {\"bandwidth_mb_s\": ${bw:-0}, \"iops\": ${iops:-0}}, \"cpu\": $(delta "$before" "$after")}" >> "$RESULTS"
}

row() { # ROW SHOAL_POOL CEPH_POOL ARGS...
  local name="$1" sp="$2" cp="$3"; shift 3
  shoal_row "$name" "$sp" "$@"
  if [ "$CEPH" = 1 ]; then ceph_row "$name" "$cp" "$@"; fi
}

row "EC$K+$M-4M-write" ec shoalec "$SECS" write -t 16 --no-cleanup
row "EC$K+$M-4M-seq" ec shoalec "$SECS" seq -t 16
row "EC$K+$M-4M-rand" ec shoalec "$SECS" rand -t 16
shoal_row "EC$K+$M-4K-overwrite" ec "$SECS" overwrite -b 4096 -t 16
if [ "$CEPH" = 1 ]; then
  # An image of 1 GiB in 4 MiB objects, its data in the EC pool, written
  # whole first: the random writes then overwrite existing objects.
  rbd rm shoalrep2/shoalbench >/dev/null 2>&1 || true
  if ! rbd create --size 1G --data-pool shoalec shoalrep2/shoalbench >/dev/null 2>&1; then
    echo "ceph: no image on the EC pool (overwrites on EC pools need bluestore OSDs): overwrite row skipped" >&2
  else
  rbd bench --io-type write --io-pattern seq --io-size 4M --io-threads 16 --io-total 1G shoalrep2/shoalbench >/dev/null 2>&1
  before="$(cpu_of "$CEPH_RUN")"
  out="$(timeout $((SECS * 4 + 60)) rbd bench --io-type write --io-pattern rand --io-size 4K --io-threads 16 --io-total 4G shoalrep2/shoalbench 2>&1 & pid=$!; sleep "$SECS"; kill -INT $pid 2>/dev/null; wait $pid)" || true
  after="$(cpu_of "$CEPH_RUN")"
  # rbd bench prints "SEC OPS OPS/SEC BYTES/SEC" each second.
  iops="$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {s += $3; n++} END {if (n) printf "%.0f", s / n; else print 0}')"
  echo "{\"system\": \"ceph\", \"row\": \"EC$K+$M-4K-overwrite\", \"args\": \"rbd bench rand write 4K\", \"bench\": {\"bandwidth_mb_s\": $(python3 -c "print(${iops:-0} * 4096 / 1e6)"), \"iops\": ${iops:-0}}, \"cpu\": $(delta "$before" "$after")}" >> "$RESULTS"
  rbd rm shoalrep2/shoalbench >/dev/null 2>&1 || true
  fi
fi
"$SHOAL" bench cleanup -p ec >/dev/null
[ "$CEPH" = 1 ] && rados -p shoalec cleanup >/dev/null 2>&1 || true
row "EC$K+$M-4K-write" ec shoalec "$SECS" write -b 4096 -t 16
row "rep2-4M-write" rep2 shoalrep2 "$SECS" write -t 16

python3 - "$RESULTS" "$K" "$M" "$OSDS" "$STORE" "$SECS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
k, m, osds, store, secs = sys.argv[2:7]
secs = float(secs)
shoal = {r["row"]: r for r in rows if r["system"] == "shoal"}
ceph = {r["row"]: r for r in rows if r["system"] == "ceph"}
print(f"{k}+{m} on {osds} OSDs ({store} stores)\n")
print("| row | MB/s | IOPS | daemon CPU s | Ceph MB/s | Ceph IOPS | Ceph CPU s | Shoal/Ceph |")
print("|---|---|---|---|---|---|---|---|")
for name, r in shoal.items():
    b = r["bench"]; c = ceph.get(name)
    cb = c["bench"] if c else None
    small = "4K" in name
    mine = b["iops"] if small else b["bandwidth_mb_s"]
    base = (cb["iops"] if small else cb["bandwidth_mb_s"]) if cb else 0
    ratio = f"{mine / base:.2f}×" if base else "-"
    print(f"| {name} | {b['bandwidth_mb_s']:.1f} | {b['iops']:.0f} | {r['cpu']:.1f} | "
          f"{cb['bandwidth_mb_s'] if cb else '-'} | {cb['iops'] if cb else '-'} | {c['cpu'] if c else '-'} | {ratio} |")
# Daemon CPU seconds per GiB written (each row ran `secs` seconds).
per_gib = lambda r: r["cpu"] / max(r["bench"]["bandwidth_mb_s"] * secs / 1024, 1e-9)
w, rep = shoal.get(f"EC{k}+{m}-4M-write"), shoal.get("rep2-4M-write")
if w and rep:
    ew, rw = per_gib(w), per_gib(rep)
    print(f"\ndaemon CPU s per GiB written: EC {ew:.2f}, size-2 replication {rw:.2f} (EC/rep2 {ew / rw:.2f}×; target ≤ 1.5×)")
EOF
echo
echo "raw results: $RESULTS"
