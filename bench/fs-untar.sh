#!/usr/bin/env bash
# BENCHMARKS.md's F1 side by side in one run: `tar xf` of the Linux 6.1
# source (Debian's linux-source-6.1, 83 731 entries, decompressed once so
# the timing is about file creation, not xz), then `rm -rf`, on tmpfs, on
# the local disk (ext4), on `shoal fs mount` (a `shoal dev up --fs`
# cluster, mem store, as the Ceph baseline's memstore) and on ceph-fuse
# (Ceph 16 from Debian, memstore OSDs and an MDS, set up by
# ../shared/bench/ceph/setup.sh memstore --mds). Each file system runs
# alone on the machine. The untar on a network file system counts until
# the tree is durable: Shoal's ends with an fsync of the tree's root
# (which waits for every create the client sent without waiting), Ceph's
# as in measure.sh with `sync`. The tree on Shoal is then compared with
# the local one (`diff -r`, and `find | wc -l`). Everything is stopped at
# the end, even on failure.
#
# Needs root, /dev/fuse, Debian's linux-source-6.1 (installed if missing)
# and, for the Ceph half, ceph, ceph-mon, ceph-osd, ceph-mgr, ceph-mds and
# ceph-fuse.
# Usage: bench/fs-untar.sh [--no-ceph] [--no-local]
#   SHOAL=path/to/shoal (default: target/release/shoal)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CEPH_DIR="${CEPH_DIR:-$ROOT/../shared/bench/ceph}"
SHOAL="${SHOAL:-$ROOT/target/release/shoal}"
CEPH=1
LOCAL=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-ceph) CEPH=0; shift ;;
    --no-local) LOCAL=0; shift ;;
    *) echo "usage: $0 [--no-ceph] [--no-local]" >&2; exit 2 ;;
  esac
done
[ -x "$SHOAL" ] || { echo "$0: build first: cargo build --release -p shoal" >&2; exit 1; }
export RUN="${RUN:-/tmp/ceph-bench}"
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/shoal-fs-untar.XXXXXX")"
DIR="$WORK/cluster"
MNT="$WORK/mnt"
CEPH_MNT="$WORK/ceph-mnt"
MOUNT_PID=""
cleanup() {
  [ -n "$MOUNT_PID" ] && kill "$MOUNT_PID" 2>/dev/null || true
  sleep 1
  umount -l "$MNT" 2>/dev/null || true
  umount -l "$CEPH_MNT" 2>/dev/null || true
  "$CEPH_DIR/teardown.sh" --purge >/dev/null 2>&1 || true
  "$SHOAL" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  rm -rf "$WORK" /dev/shm/shoal-untar
}
trap cleanup EXIT

TXZ=/usr/src/linux-source-6.1.tar.xz
[ -f "$TXZ" ] || apt-get install -y -qq linux-source-6.1 >/dev/null
TAR="${TAR:-/var/tmp/linux-source-6.1.tar}"
[ -f "$TAR" ] || xz -dc "$TXZ" > "$TAR"
ENTRIES=$(tar tf "$TAR" | wc -l)
echo "tarball: $TAR, $ENTRIES entries, $(du -h "$TAR" | cut -f1)"
TOP=$(set +o pipefail; tar tf "$TAR" 2>/dev/null | head -1 | cut -d/ -f1)

CLK_TCK=$(getconf CLK_TCK)
cpu_of() { # total CPU seconds of the processes whose pids are given
  local t=0
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$(awk -v t="$t" -v hz="$CLK_TCK" '{sub(/.*\) /,""); printf "%.2f", t + ($12+$13)/hz}' "/proc/$p/stat")
  done
  echo "$t"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# timed NAME CMD...: prints "NAME: S s"
timed() {
  local name="$1"; shift
  local t0; t0=$(now)
  "$@"
  echo "$name: $(since "$t0") s"
}

if [ "$LOCAL" = 1 ]; then
  echo "== tmpfs and local disk"
  rm -rf /dev/shm/shoal-untar; mkdir -p /dev/shm/shoal-untar
  sync; timed "untar tmpfs" tar xf "$TAR" -C /dev/shm/shoal-untar
  timed "rm -rf tmpfs" rm -rf /dev/shm/shoal-untar
  mkdir -p "$WORK/local"
  sync; timed "untar local disk (+sync)" bash -c "tar xf '$TAR' -C '$WORK/local' && sync"
  timed "rm -rf local disk (+sync)" bash -c "rm -rf '$WORK/local/$TOP' && sync"
fi

echo "== Shoal (shoal fs mount)"
"$SHOAL" dev up --dir "$DIR" --store mem --no-gateway --no-mgr --fs >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
mkdir -p "$MNT"
"$SHOAL" fs mount "$MNT" > "$WORK/mount.log" 2>&1 &
MOUNT_PID=$!
for _ in $(seq 1 100); do findmnt "$MNT" >/dev/null && break; sleep 0.2; done
findmnt "$MNT" >/dev/null || { cat "$WORK/mount.log"; exit 1; }
daemons=$(cat "$DIR"/run/*.pid)
c0=$(cpu_of $daemons); m0=$(cpu_of "$MOUNT_PID")
t0=$(now)
tar xf "$TAR" -C "$MNT"
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$MNT"
echo "untar shoal (durable): $(since "$t0") s, daemons $(awk -v a="$c0" -v b="$(cpu_of $daemons)" 'BEGIN{printf "%.1f", b-a}') CPU-s, client $(awk -v a="$m0" -v b="$(cpu_of "$MOUNT_PID")" 'BEGIN{printf "%.1f", b-a}') CPU-s"
echo "entries on shoal: $(find "$MNT/$TOP" | wc -l) (tarball: $ENTRIES)"
if [ "$LOCAL" = 1 ]; then
  mkdir -p "$WORK/local"; tar xf "$TAR" -C "$WORK/local"
  if diff -r "$WORK/local/$TOP" "$MNT/$TOP" > "$WORK/diff.txt" 2>&1; then
    echo "diff -r against the local tree: empty"
  else
    echo "diff -r against the local tree: $(wc -l < "$WORK/diff.txt") lines:"; head -20 "$WORK/diff.txt"
  fi
  rm -rf "$WORK/local"
fi
c0=$(cpu_of $daemons); t0=$(now)
rm -rf "${MNT:?}/$TOP"
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$MNT"
echo "rm -rf shoal (durable): $(since "$t0") s, daemons $(awk -v a="$c0" -v b="$(cpu_of $daemons)" 'BEGIN{printf "%.1f", b-a}') CPU-s"
kill "$MOUNT_PID"; wait "$MOUNT_PID" 2>/dev/null || true; MOUNT_PID=""
"$SHOAL" dev down --dir "$DIR" --wipe >/dev/null

if [ "$CEPH" = 1 ]; then
  echo "== Ceph (ceph-fuse)"
  command -v ceph-fuse >/dev/null || { echo "ceph-fuse is not installed: apt-get install ceph ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse" >&2; exit 1; }
  "$CEPH_DIR/setup.sh" memstore --mds >/dev/null
  export CEPH_CONF="$RUN/ceph.conf"
  mkdir -p "$CEPH_MNT"
  ceph-fuse -c "$CEPH_CONF" -n client.admin "$CEPH_MNT" >/dev/null 2>&1
  sleep 2
  findmnt "$CEPH_MNT" >/dev/null || { echo "ceph-fuse did not mount" >&2; exit 1; }
  cdaemons=$(cat "$RUN"/pid/*.pid)
  c0=$(cpu_of $cdaemons); t0=$(now)
  timeout 900 bash -c "tar xf '$TAR' -C '$CEPH_MNT' && sync" || echo "(ceph-fuse untar stopped after 900 s)"
  echo "untar ceph-fuse (+sync): $(since "$t0") s, daemons $(awk -v a="$c0" -v b="$(cpu_of $cdaemons)" 'BEGIN{printf "%.1f", b-a}') CPU-s"
  t0=$(now)
  timeout 900 rm -rf "${CEPH_MNT:?}/$TOP" || true
  echo "rm -rf ceph-fuse: $(since "$t0") s"
fi
