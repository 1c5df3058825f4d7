#!/usr/bin/env bash
# Faults between hosts, on a cluster deploy/cluster.sh brought up (same
# NAME, TAG, SUBNET, WORK). Each scenario runs the history workload
# (`shoal bench history`: every acknowledged write remembered, every read
# checked, every object read once more at the end) across its fault, then
# checks that the cluster heals to HEALTH_OK, deep-scrubs every PG and
# checks that no copy differs. It prints one JSON line of figures per
# scenario and exits non-zero at the first failure.
#
# Usage: deploy/faults.sh [--hold SECS] SCENARIO...
#   kill        host h3 SIGKILLed, started again after the hold
#   partition   h3 cut off both ways (its monitor too): a client on h3 gets
#               no write acknowledged, the majority goes on; healed
#   oneway      h3 receives nothing but still sends; healed
#   rolling     every daemon restarted, one host at a time
#   netem       latency, loss and a rate limit on h3's link (NETEM, default
#               "delay 40ms 10ms loss 3% rate 50mbit") for the hold
#               (without sch_netem in the kernel: loss and rate only)
# --hold: how long each fault lasts (default 30 s); POOL (default rbd).
# Figures: the workload's write latency p50/p99/max and longest stall (the
# client's view of the fault), failed ops, and for faults that end
# (kill, partition, oneway) the seconds from the end of the fault to every
# PG active+clean.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
C="$HERE/cluster.sh"
HOLD=30
POOL="${POOL:-rbd}"
NETEM="${NETEM:-delay 40ms 10ms loss 3% rate 50mbit}"
while [ $# -gt 0 ]; do
  case "$1" in
    --hold) HOLD="$2"; shift 2 ;;
    -*) sed -n '2,/^set -euo/p' "$0" | sed '$ d'; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$ d'; exit 2; }

fail() { echo "faults.sh: $*" >&2; exit 1; }

pg_clean() {
  "$C" run pg stat --format json | python3 -c '
import json, sys
v = json.load(sys.stdin)
n = sum(s["num"] for s in v["num_pg_by_state"] if s["name"] == "active+clean")
sys.exit(0 if v["num_pgs"] > 0 and n == v["num_pgs"] else 1)'
}

health_ok() { "$C" run health 2>/dev/null | grep -q '^HEALTH_OK'; }

# Seconds until $1 holds (at most $2), or failure.
time_until() {
  local what="$1" limit="$2" start=$SECONDS
  until "$what" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$limit" ] || fail "not $what within $limit s"
    sleep 1
  done
  echo $((SECONDS - start))
}

# Deep-scrubs every PG and checks no copy differs.
scrub_all() {
  local o
  for o in 0 1 2 3 4 5; do "$C" run osd deep-scrub "$o" >/dev/null; done
  sleep 10
  local start=$SECONDS
  until ! "$C" run pg dump --format json | grep -q scrubbing; do
    [ $((SECONDS - start)) -lt 120 ] || fail "deep scrubs still running after 120 s"
    sleep 2
  done
  local detail
  detail="$("$C" run health detail)"
  case "$detail" in
    *INCONSISTENT*|*SCRUB_ERRORS*|*DAMAGED*) fail "scrub found damage: $detail" ;;
  esac
}

# The workload's report, checked: no violation, every object read at the
# end; prints the figures given as key=value words with it.
finish() {
  local name="$1" prefix="$2"
  shift 2
  local report rc=0
  report="$("$C" workload-wait "$prefix")" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name: the history check failed: $report"
  python3 - "$name" "$report" "$@" <<'EOF'
import json, sys
name, report = sys.argv[1], json.loads(sys.argv[2])
out = {"scenario": name}
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    out[k] = float(v) if v.replace(".", "", 1).isdigit() else v
for k in ("acked_writes", "failed_writes", "reads", "failed_reads", "max_stall_s", "max_error_span_s"):
    out[k] = report[k]
out["write_latency_s"] = report["write_latency_s"]
out["errors"] = report["errors"]
print(json.dumps(out))
EOF
}

run_kill() {
  "$C" workload kill "$POOL" $((HOLD + 20)) --settle 180
  sleep 8
  "$C" kill-host h3
  sleep "$HOLD"
  "$C" start-host h3
  local heal
  heal="$(time_until pg_clean 300)"
  finish kill kill "clean_after_s=$heal"
}

run_partition() {
  "$C" workload part "$POOL" $((HOLD + 20)) --settle 180
  # A client on h3, connected before the cut: nothing it writes while cut
  # off may be acknowledged.
  ON=h3 "$C" workload minority "$POOL" $((HOLD + 10)) --objects 8 --workers 2 --settle 180
  sleep 8
  local cutting=$SECONDS
  "$C" cut-host h3 both
  local cut_at=$SECONDS
  # Cutting is an iptables change in each of h3's containers: seconds on a
  # loaded machine, counted from when it began.
  local cut_took=$((cut_at - cutting))
  sleep "$HOLD"
  local cut_s=$((SECONDS - cut_at))
  "$C" heal-host h3
  local heal
  heal="$(time_until pg_clean 300)"
  local minority rc=0
  minority="$("$C" workload-wait minority)" || rc=$?
  [ "$rc" -eq 0 ] || fail "partition: the minority client's history check failed: $minority"
  # Its run began 8 s before the cut began; the cut took cut_took s to be in
  # place; 3 s more for acks already on the way.
  python3 -c '
import json, sys
r, first, last = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
during = r["acks_per_s"][first:last]
assert sum(during) == 0, f"the cut-off host acknowledged writes in seconds {first}..{last}: {during}"
' "$minority" $((11 + cut_took)) $((8 + cut_s)) || fail "partition: a client on the cut-off host: $minority"
  finish partition part "clean_after_s=$heal"
}

run_oneway() {
  "$C" workload oneway "$POOL" $((HOLD + 20)) --settle 180
  sleep 8
  "$C" cut-host h3 in
  sleep "$HOLD"
  "$C" heal-host h3
  local heal
  heal="$(time_until pg_clean 300)"
  finish oneway oneway "clean_after_s=$heal"
}

run_rolling() {
  # Long enough for three hosts' restarts; it ends when they are done.
  local stop="${WORK:-/tmp/shoal-cluster-${NAME:-shoal3}}/etc/stop-rolling"
  rm -f "$stop"
  "$C" workload rolling "$POOL" 900 --settle 180 --stop-file /etc/shoal/stop-rolling
  sleep 5
  local start=$SECONDS
  "$C" rolling-restart >/dev/null
  sleep 5
  touch "$stop"
  finish rolling rolling "restart_s=$((SECONDS - start))"
}

run_netem() {
  "$C" netem h3 "$NETEM"
  "$C" workload netem "$POOL" "$HOLD" --settle 120
  local report rc=0
  report="$("$C" workload-wait netem)" || rc=$?
  "$C" netem h3 off
  [ "$rc" -eq 0 ] || fail "netem: the history check failed: $report"
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
print(json.dumps({"scenario": "netem", "netem": sys.argv[2], **{k: r[k] for k in
  ("acked_writes", "failed_writes", "reads", "failed_reads", "max_stall_s", "write_latency_s", "errors")}}))
' "$report" "$NETEM"
}

for s in "$@"; do
  case "$s" in
    kill|partition|oneway|rolling|netem) "run_$s" ;;
    *) fail "no scenario $s" ;;
  esac
  time_until health_ok 300 >/dev/null
  scrub_all
done
