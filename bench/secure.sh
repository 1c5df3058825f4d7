#!/usr/bin/env bash
# The secure mode's cost (issue 41 point 4): bench/cluster.sh's rows R1-R4
# and the QD1 4 KiB write (R3-t1) on a dev cluster in crc mode, then on one
# in secure mode (every daemon and the bench client), alternated ROUNDS
# times in one run, with a table of secure/crc per row.
#
# Then, as the QD1 row moves a lot on shared cores, QD1 alone: QD1_ROUNDS
# rounds of a fresh cluster per mode, alternated, two 6 s runs of
# `shoal bench -p rbd 6 write -b 4096 -t 1` each.
#
# Usage: bench/secure.sh [--rounds N (0: QD1 alone)] [--seconds N] [--store mem|block] [--out DIR] [--qd1-rounds N]
#   SHOAL=path/to/shoal (default: target/release/shoal, built if missing)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROUNDS=2
SECS=10
STORE=mem
OUT="${TMPDIR:-/tmp}/shoal-secure-$$"
QD1_ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --store) STORE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --qd1-rounds) QD1_ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--seconds N] [--store mem|block] [--out DIR] [--qd1-rounds N]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
# --rounds 0: the QD1 runs alone.
[ "$ROUNDS" -gt 0 ] && {
for r in $(seq 1 "$ROUNDS"); do
  for mode in crc secure; do
    echo "== round $r, ms_mode=$mode" >&2
    CEPH_CONF= "$HERE/cluster.sh" --store "$STORE" --seconds "$SECS" \
      --out "$OUT/$mode-$r" --set "ms_mode=$mode" >/dev/null
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
rows = ["R1", "R2-seq", "R2-rand", "R3-t16", "R4", "R3-t1"]
def load(mode, r):
    d = {}
    for l in open(f"{out}/{mode}-{r}/results.jsonl"):
        j = json.loads(l)
        d[j["row"]] = j
    return d
runs = {m: [load(m, r) for r in range(1, rounds + 1)] for m in ("crc", "secure")}
def fig(j):
    b = j["bench"]
    small = "4096" in j["args"] or j["row"] in ("R4",)
    return b["iops"] if small else b["bandwidth_mb_s"]
print("| row | unit | crc (each round) | secure (each round) | secure/crc (medians) | QD1 lat µs crc / secure | daemon CPU µs/op crc / secure |")
print("|---|---|---|---|---|---|---|")
for row in rows:
    c = [fig(d[row]) for d in runs["crc"]]
    s = [fig(d[row]) for d in runs["secure"]]
    unit = "IOPS" if ("4096" in runs["crc"][0][row]["args"] or row == "R4") else "MB/s"
    lat = lambda m: statistics.median(d[row]["bench"]["latency_avg_s"] * 1e6 for d in runs[m])
    cpu = lambda m: statistics.median(d[row]["daemon_cpu_s"]["daemons_total"] * 1e6 / max(d[row]["bench"]["ops"], 1) for d in runs[m])
    ratio = statistics.median(s) / statistics.median(c) if statistics.median(c) else 0
    print(f"| {row} | {unit} | {' / '.join(f'{x:.0f}' for x in c)} | {' / '.join(f'{x:.0f}' for x in s)} | "
          f"{ratio:.2f} | {lat('crc'):.0f} / {lat('secure'):.0f} | {cpu('crc'):.0f} / {cpu('secure'):.0f} |")
PY
}
SHOAL="${SHOAL:-$HERE/../target/release/shoal}"
: > "$OUT/qd1.txt"
for r in $(seq 1 "$QD1_ROUNDS"); do
  for mode in crc secure; do
    D="$OUT/qd1-$mode"
    "$SHOAL" dev down --dir "$D" --wipe >/dev/null 2>&1 || true
    "$SHOAL" --set "ms_mode=$mode" dev up --dir "$D" --osds 3 --store "$STORE" --no-gateway --no-mgr >/dev/null
    for i in 1 2; do
      SHOAL_CONF="$D/shoal.conf" "$SHOAL" bench -p rbd 6 write -b 4096 -t 1 --format json \
        | python3 -c "import json,sys; j=json.load(sys.stdin); print('$mode', j['latency_avg_s']*1e6, j['latency_p50_s']*1e6)" >> "$OUT/qd1.txt"
    done
    "$SHOAL" dev down --dir "$D" --wipe >/dev/null 2>&1 || true
  done
done
python3 - "$OUT/qd1.txt" <<'PY'
import sys, statistics
runs = {"crc": [], "secure": []}
for l in open(sys.argv[1]):
    m, avg, p50 = l.split()
    runs[m].append((float(avg), float(p50)))
print()
print("| QD1 4 KiB write | average latency per run (µs) | median | mean | p50, median of runs |")
print("|---|---|---|---|---|")
for m, v in runs.items():
    avgs = [a for a, _ in v]
    print(f"| {m} | {', '.join(f'{a:.0f}' for a in avgs)} | {statistics.median(avgs):.0f} | "
          f"{statistics.mean(avgs):.0f} | {statistics.median(p for _, p in v):.0f} |")
PY
echo "raw results under $OUT" >&2
