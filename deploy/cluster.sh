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
#   deploy/cluster.sh kill-host hN | start-host hN   SIGKILL / start a host's containers
#   deploy/cluster.sh cut-host hN | heal-host hN     disconnect / reconnect a host
#   deploy/cluster.sh down    remove the containers, network and data
# Environment: NAME (default shoal3), TAG (default dev), SUBNET (default
#   172.29.0), WORK (default /tmp/shoal-cluster-$NAME), OSD_BYTES (1 GiB).
set -euo pipefail
NAME="${NAME:-shoal3}"
TAG="${TAG:-dev}"
SUBNET="${SUBNET:-172.29.0}"
WORK="${WORK:-/tmp/shoal-cluster-$NAME}"
OSD_BYTES="${OSD_BYTES:-$((1 << 30))}"
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

case "${1:-}" in
  up) up ;;
  run) shift; client "$@" ;;
  kill-host) docker kill --signal KILL $(containers_of "$2") >/dev/null ;;
  start-host) docker start $(containers_of "$2") >/dev/null ;;
  cut-host)
    for c in $(containers_of "$2"); do docker network disconnect "$NET" "$c"; done ;;
  heal-host)
    # Each container back at its own address.
    for c in $(containers_of "$2"); do
      n="$(docker inspect -f '{{.Name}}' "$c")"
      n="${n#/"$NAME"-}"
      case "$n" in
        mon-*) i="$(host_index "$2")"; ip="$(mon_ip "$i")" ;;
        osd-*) ip="$(osd_ip "${n#osd-}")" ;;
      esac
      docker network connect --ip "$ip" "$NET" "$c"
    done ;;
  down)
    ids="$(docker ps -aq --filter "label=shoal.cluster=$NAME")"
    [ -n "$ids" ] && docker rm -f $ids >/dev/null
    docker network rm "$NET" >/dev/null 2>&1 || true
    rm -rf "$WORK"
    ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
