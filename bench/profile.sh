#!/usr/bin/env bash
# Flame graphs of the OSDs of a fresh `shoal dev up` cluster (3 OSDs, pool
# size 3) while `shoal bench` runs one of the object rows of
# ../shared/BENCHMARKS.md: R3 (4 KiB writes, 16 in flight), R1 (4 MiB
# writes) or R2 (4 MiB random reads, 16 in flight). perf samples every OSD process (DWARF call
# graphs: the release profile keeps debug line info), and inferno folds
# the stacks into an SVG.
#
# Usage: bench/profile.sh R1|R2|R3 OUT.svg [--store mem|block] [--seconds N]
#   SHOAL=path/to/shoal (default: target/release/shoal)
#   FOLDED=path: also keep the folded stacks there (for inferno-diff-folded)
# Needs: perf (Debian's linux-perf), inferno (`cargo install inferno`).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ROW="${1:?usage: $0 R1|R2|R3 OUT.svg [--store mem|block] [--seconds N]}"
SVG="${2:?usage: $0 R1|R2|R3 OUT.svg [--store mem|block] [--seconds N]}"
shift 2
STORE=mem
SECS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --store) STORE="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
for tool in perf inferno-collapse-perf inferno-flamegraph; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is not on PATH" >&2; exit 1; }
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shoal-profile.XXXXXX")"
DIR="$WORK/cluster"
cleanup() {
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SHOAL" dev up --dir "$DIR" --store "$STORE" --osds 3 >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
for _ in $(seq 1 60); do
  "$SHOAL" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)' && break
  sleep 1
done
osd_pids=$(for f in "$DIR"/run/osd.*.pid; do cat "$f"; done | paste -sd, -)

case "$ROW" in
  R3) bench=("$SECS" write -b 4096 -t 16) ;;
  R1) bench=("$SECS" write -t 16) ;;
  R2)
    "$SHOAL" bench -p rbd "$SECS" write -t 16 --no-cleanup >/dev/null
    bench=("$SECS" rand -t 16)
    ;;
  *) echo "$0: row must be R1, R2 or R3" >&2; exit 2 ;;
esac

# Sample from one second into the row until one second before its end.
"$SHOAL" bench -p rbd "${bench[@]}" --format json > "$WORK/bench.json" &
bench_pid=$!
sleep 1
perf record -q -F 199 --call-graph dwarf,32768 -p "$osd_pids" -o "$WORK/perf.data" \
  -- sleep "$((SECS - 2))" 2>/dev/null
wait "$bench_pid"
perf script -i "$WORK/perf.data" 2>/dev/null | inferno-collapse-perf > "$WORK/folded"
title="shoal osds, $ROW ($STORE), $(git -C "$ROOT" rev-parse --short HEAD)"
inferno-flamegraph --title "$title" --width 1600 --minwidth 1 < "$WORK/folded" > "$SVG"
[ -n "${FOLDED:-}" ] && cp "$WORK/folded" "$FOLDED"
python3 - "$WORK/bench.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
print(f"bench: {b['bandwidth_mb_s']:.1f} MB/s, {b['iops']:.0f} IOPS, client CPU {b['client_cpu_us_per_op']:.0f} us/op")
PY
# The hottest frames by self time, for the write-up beside the SVG.
awk '{n=$NF; $NF=""; split($0, f, ";"); leaf=f[length(f)]; gsub(/ +$/, "", leaf); self[leaf]+=n; t+=n}
     END {for (k in self) printf "%5.1f%%  %s\n", 100*self[k]/t, k}' "$WORK/folded" | sort -rn | head -25
echo "flame graph: $SVG"
