#!/usr/bin/env bash
# A cluster of three hosts in containers, from the image deploy/image.sh
# builds: each host h1..h3 runs a monitor and two OSDs, each daemon in its
# own container with its own address on a private network, grouped into a
# host by its container host name (the OSDs' CRUSH host) and the label
# shoal.host. Pools use the host as failure domain: `rbd` (3 copies) and
# `ec` (2+1). A client runs as one more container on the network.
#
# Usage:
#   deploy/cluster.sh up      build nothing; start the cluster (image shoal:$TAG)
#   deploy/cluster.sh run ARGS...   `shoal ARGS` as a client on the network
#   deploy/cluster.sh run-on hN ARGS...   the same from host hN (its network
#       namespace: what a cut of hN cuts)
#   deploy/cluster.sh kill-host hN | start-host hN   SIGKILL / start a host's containers
#   deploy/cluster.sh restart-host hN   stop (SIGTERM, as systemd does) and
#       start a host's daemons, one at a time
#   deploy/cluster.sh rolling-restart   restart-host each host in turn, each
#       once every PG is active+clean again
#   deploy/cluster.sh cut-host hN [both|in|out] | heal-host hN   cut a host
#       off from the others (packets dropped in its namespaces, by
#       iptables through nsenter: connections hang, as with a pulled
#       cable): both ways, or only what it receives or only what it sends
#   deploy/cluster.sh netem hN "delay 100ms 20ms loss 5% rate 20mbit" | netem hN off
#       latency and loss on a host's link (tc netem; where the kernel has
#       no sch_netem, loss by iptables' statistic match and rate by tbf,
#       and no delay)
#   deploy/cluster.sh workload PREFIX POOL SECONDS [ARGS...] | workload-wait PREFIX
#       start `shoal bench -p POOL history SECONDS` in the background (every
#       acknowledged write remembered, every read checked); wait for it,
#       print its JSON report and exit as it did (ON=hN: from host hN)
#   deploy/cluster.sh down    remove the containers, network and data
# Environment: NAME (default shoal3), TAG (default dev), SUBNET (default
#   172.29.0), WORK (default /tmp/shoal-cluster-$NAME), OSD_BYTES (1 GiB).
set -euo pipefail
NAME="${NAME:-shoal3}"
TAG="${TAG:-dev}"
SUBNET="${SUBNET:-172.29.0}"
WORK="${WORK:-/tmp/shoal-cluster-$NAME}"
OSD_BYTES="${OSD_BYTES:-$((1 << 30))}"
LOG_LEVEL="${LOG_LEVEL:-info}"
IMAGE="shoal:$TAG"
NET="$NAME-net"
HOSTS=(h1 h2 h3)
MONS=(a b c)

mon_ip() { echo "$SUBNET.$((11 + $1))"; }          # host index -> monitor address
osd_ip() { echo "$SUBNET.$((21 + $1))"; }          # OSD id -> address
osd_ids() { echo "$((2 * $1)) $((2 * $1 + 1))"; }  # host index -> its OSDs
host_index() { case "$1" in h1) echo 0 ;; h2) echo 1 ;; h3) echo 2 ;; *) echo "no host $1" >&2; exit 2 ;; esac; }

# `shoal ARGS` in a throwaway container on the network, as client.admin.
client() {
  docker run --rm --network "$NET" \
    -v "$WORK/etc:/etc/shoal:ro" "$IMAGE" --conf /etc/shoal/shoal.conf "$@"
}

# A daemon container of host $1: name $2, address $3, then shoal's arguments.
daemon() {
  local host="$1" name="$2" ip="$3"
  shift 3
  docker run -d --name "$NAME-$name" --hostname "$host" --label "shoal.cluster=$NAME" \
    --label "shoal.host=$host" --network "$NET" --ip "$ip" \
    -v "$WORK/etc:/etc/shoal:ro" -v "$WORK/$host:/var/lib/shoal" \
    "$IMAGE" --conf /etc/shoal/shoal.conf "$@" >/dev/null
}

wait_for() {
  local what="$1" secs="$2"
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$0: no $what within $secs s" >&2
      return 1
    fi
    sleep 1
  done
}

all_clean() {
  client pg stat --format json | python3 -c '
import json, sys
v = json.load(sys.stdin)
n = sum(s["num"] for s in v["num_pg_by_state"] if s["name"] == "active+clean")
sys.exit(0 if v["num_pgs"] > 0 and n == v["num_pgs"] else 1)'
}

osds_up() {
  client osd stat --format json | python3 -c '
import json, sys
sys.exit(0 if json.load(sys.stdin)["num_up_osds"] == 6 else 1)'
}

up() {
  docker image inspect "$IMAGE" >/dev/null 2>&1 || {
    echo "$0: no image $IMAGE (deploy/image.sh --tag $TAG)" >&2
    exit 1
  }
  if docker network inspect "$NET" >/dev/null 2>&1; then
    echo "$0: $NET exists ($0 down first)" >&2
    exit 1
  fi
  mkdir -p "$WORK/etc" "$WORK/h1" "$WORK/h2" "$WORK/h3"
  local hosts=""
  for i in 0 1 2; do hosts="$hosts${hosts:+,}${MONS[$i]}=$(mon_ip "$i"):6789"; done
  cat > "$WORK/etc/shoal.conf" <<END
# Written by deploy/cluster.sh: three hosts, each a monitor and two OSDs.
[global]
mon_host = "$hosts"
keyring = "/etc/shoal/keyring"
osd_crush_failure_domain = "host"
mon_osd_reporter_subtree_level = "host"
mon_osd_min_down_reporters = 2
osd_heartbeat_grace_ms = 6000
mon_osd_down_out_interval_ms = 600000
osd_data = "/var/lib/shoal/osd-\$id"
osd_store_bytes = $OSD_BYTES
osd_op_num_shards = 1
log_level = "$LOG_LEVEL"
END
  # Daemons have fixed addresses below .128; throwaway containers (clients,
  # mkfs) take theirs from .128 up, so no client ever holds a daemon's.
  docker network create --subnet "$SUBNET.0/24" --ip-range "$SUBNET.128/25" \
    --label "shoal.cluster=$NAME" "$NET" >/dev/null
  # Monitors: the first makes the keys; the others take its keyring.
  for i in 0 1 2; do
    local h="${HOSTS[$i]}" m="${MONS[$i]}" extra=()
    [ "$i" -gt 0 ] && extra=(--keyring /var/lib/shoal/first.keyring)
    [ "$i" -gt 0 ] && cp "$WORK/h1/mon-a/keyring" "$WORK/$h/first.keyring"
    docker run --rm --network "$NET" -v "$WORK/etc:/etc/shoal:ro" -v "$WORK/$h:/var/lib/shoal" \
      "$IMAGE" --conf /etc/shoal/shoal.conf mon mkfs --id "$m" --data "/var/lib/shoal/mon-$m" \
      "${extra[@]}" >/dev/null
    [ "$i" -eq 0 ] && cp "$WORK/h1/mon-a/keyring" "$WORK/etc/keyring"
  done
  for i in 0 1 2; do
    local h="${HOSTS[$i]}" m="${MONS[$i]}"
    daemon "$h" "mon-$m" "$(mon_ip "$i")" mon --id "$m" --data "/var/lib/shoal/mon-$m"
  done
  wait_for "monitor quorum" 60 client status
  for i in 0 1 2; do
    local h="${HOSTS[$i]}"
    for id in $(osd_ids "$i"); do
      docker run --rm --network "$NET" -v "$WORK/etc:/etc/shoal:ro" \
        -v "$WORK/$h:/var/lib/shoal" "$IMAGE" --conf /etc/shoal/shoal.conf \
        osd mkfs --id "$id" >/dev/null
      daemon "$h" "osd-$id" "$(osd_ip "$id")" \
        --set "public_addr=$(osd_ip "$id"):6800" osd --id "$id"
    done
  done
  wait_for "six OSDs up" 90 osds_up
  client osd pool create rbd 32 >/dev/null
  client osd erasure-code-profile set host21 k=2 m=1 crush-failure-domain=host >/dev/null
  client osd pool create ec 16 erasure host21 >/dev/null
  wait_for "every PG active+clean" 180 all_clean
  client osd tree
  echo "cluster $NAME is up: $WORK/etc/shoal.conf; deploy/cluster.sh run status"
}

containers_of() {
  docker ps -aq --filter "label=shoal.cluster=$NAME" --filter "label=shoal.host=$1"
}

# Runs a command in container $1's network namespace (with the host's
# iptables, tc and ip: the image has none).
in_ns() {
  local pid
  pid="$(docker inspect -f '{{.State.Pid}}' "$1")"
  shift
  nsenter -t "$pid" -n "$@"
}

# The interface of container $1 on the cluster network.
link_of() {
  in_ns "$1" ip -o -4 addr show | awk -v net="$SUBNET." 'index($4, net) == 1 { print $2; exit }'
}

ip_of() {
  docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"
}

# Drops, in every namespace of host $1, packets between it and any other
# address of the network ($2: both, in = what it receives, out = what it
# sends). Its own daemons still reach one another.
cut_host() {
  local host="$1" mode="$2" c ip ips=()
  case "$mode" in both|in|out) ;; *) echo "cut-host: both, in or out" >&2; exit 2 ;; esac
  for c in $(containers_of "$host"); do ips+=("$(ip_of "$c")"); done
  for c in $(containers_of "$host"); do
    for chain in SHOAL-IN SHOAL-OUT; do
      in_ns "$c" iptables -N "$chain" 2>/dev/null || in_ns "$c" iptables -F "$chain"
    done
    in_ns "$c" iptables -C INPUT -j SHOAL-IN 2>/dev/null || in_ns "$c" iptables -I INPUT -j SHOAL-IN
    in_ns "$c" iptables -C OUTPUT -j SHOAL-OUT 2>/dev/null || in_ns "$c" iptables -I OUTPUT -j SHOAL-OUT
    for ip in "${ips[@]}"; do
      in_ns "$c" iptables -A SHOAL-IN -s "$ip" -j RETURN
      in_ns "$c" iptables -A SHOAL-OUT -d "$ip" -j RETURN
    done
    if [ "$mode" != out ]; then in_ns "$c" iptables -A SHOAL-IN -s "$SUBNET.0/24" -j DROP; fi
    if [ "$mode" != in ]; then in_ns "$c" iptables -A SHOAL-OUT -d "$SUBNET.0/24" -j DROP; fi
  done
}

# Stops and starts host $1's daemons one at a time, OSDs first, each with
# SIGTERM and 30 s to finish (an OSD tells the monitors it is going).
restart_host() {
  local c
  for c in $(docker ps -aq --filter "label=shoal.cluster=$NAME" --filter "label=shoal.host=$1" \
      --filter "name=$NAME-osd-") $(docker ps -aq --filter "label=shoal.cluster=$NAME" \
      --filter "label=shoal.host=$1" --filter "name=$NAME-mon-"); do
    docker restart -t 30 "$c" >/dev/null
  done
}

case "${1:-}" in
  up) up ;;
  run) shift; client "$@" ;;
  kill-host) docker kill --signal KILL $(containers_of "$2") >/dev/null ;;
  start-host) docker start $(containers_of "$2") >/dev/null ;;
  run-on)
    host="$2"; shift 2
    docker run --rm --network "container:$NAME-mon-${MONS[$(host_index "$host")]}" \
      -v "$WORK/etc:/etc/shoal:ro" "$IMAGE" --conf /etc/shoal/shoal.conf "$@" ;;
  restart-host) restart_host "$2" ;;
  rolling-restart)
    for h in "${HOSTS[@]}"; do
      echo "restarting $h"
      restart_host "$h"
      wait_for "every PG active+clean after restarting $h" 300 all_clean
    done ;;
  cut-host) cut_host "$2" "${3:-both}" ;;
  heal-host)
    for c in $(containers_of "$2"); do
      in_ns "$c" iptables -F SHOAL-IN 2>/dev/null || true
      in_ns "$c" iptables -F SHOAL-OUT 2>/dev/null || true
    done ;;
  netem)
    for c in $(containers_of "$2"); do
      dev="$(link_of "$c")"
      in_ns "$c" tc qdisc del dev "$dev" root 2>/dev/null || true
      in_ns "$c" iptables -F SHOAL-LOSS 2>/dev/null || true
      [ "$3" = off ] && continue
      # shellcheck disable=SC2086
      if ! in_ns "$c" tc qdisc replace dev "$dev" root netem $3 2>/dev/null; then
        # A kernel without sch_netem (as on these VMs): the loss through
        # iptables' statistic match both ways, the rest (delay) is not
        # available; `rate R` through a token bucket.
        loss="$(echo "$3" | sed -n 's/.*loss \([0-9.]*\)%.*/\1/p')"
        rate="$(echo "$3" | sed -n 's/.*rate \([0-9a-z]*\).*/\1/p')"
        case "$3" in *delay*) echo "cluster.sh: no sch_netem in this kernel: delay not applied" >&2 ;; esac
        if [ -n "$loss" ]; then
          p="$(python3 -c "print($loss / 100)")"
          in_ns "$c" iptables -N SHOAL-LOSS 2>/dev/null || true
          in_ns "$c" iptables -C INPUT -j SHOAL-LOSS 2>/dev/null || in_ns "$c" iptables -I INPUT -j SHOAL-LOSS
          in_ns "$c" iptables -C OUTPUT -j SHOAL-LOSS 2>/dev/null || in_ns "$c" iptables -I OUTPUT -j SHOAL-LOSS
          in_ns "$c" iptables -A SHOAL-LOSS -s "$SUBNET.0/24" -m statistic --mode random --probability "$p" -j DROP
          in_ns "$c" iptables -A SHOAL-LOSS -d "$SUBNET.0/24" -m statistic --mode random --probability "$p" -j DROP
        fi
        if [ -n "$rate" ]; then
          in_ns "$c" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 64kbit latency 200ms
        fi
      fi
    done ;;
  workload)
    prefix="$2" pool="$3" secs="$4"; shift 4
    docker rm -f "$NAME-work-$prefix" >/dev/null 2>&1 || true
    net="$NET"
    [ -n "${ON:-}" ] && net="container:$NAME-mon-${MONS[$(host_index "$ON")]}"
    docker run -d --name "$NAME-work-$prefix" --label "shoal.cluster=$NAME" --network "$net" \
      -v "$WORK/etc:/etc/shoal:ro" "$IMAGE" --conf /etc/shoal/shoal.conf \
      bench -p "$pool" history "$secs" --prefix "$prefix" --format json "$@" >/dev/null ;;
  workload-wait)
    rc="$(docker wait "$NAME-work-$2")"
    docker logs "$NAME-work-$2" 2>/dev/null | tail -1
    docker logs "$NAME-work-$2" 2>&1 >/dev/null | grep -v '^[0-9T:.-]*Z ' | tail -3 >&2 || true
    docker rm "$NAME-work-$2" >/dev/null
    exit "$rc" ;;
  down)
    ids="$(docker ps -aq --filter "label=shoal.cluster=$NAME")"
    [ -n "$ids" ] && docker rm -f $ids >/dev/null
    docker network rm "$NET" >/dev/null 2>&1 || true
    rm -rf "$WORK"
    ;;
  *) sed -n "2,/^set -euo/p" "$0" | sed "$ d"; exit 2 ;;
esac
