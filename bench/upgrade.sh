#!/usr/bin/env bash
# Upgrade in place (issue 38, point 6): a dev cluster of three BlockStore
# OSDs made and written by an older commit's build, then its OSDs replaced
# one at a time by this build's binary while a 4 KiB writer (this build's
# client) runs. Passes when the writer fails no op, every object written by
# the old build reads back as written (data, an image's snapshot), and every
# OSD's store passes a deep fsck with this build. Keep it for every later
# change of the store's on-disk format (crates/objectstore/tests/upgrade.rs
# opens the committed fixtures of each earlier format).
#
# Usage: bench/upgrade.sh OLD_COMMIT [--seconds N] [--debug]
#   SHOAL=path/to/new/shoal (default target/release/shoal, built if absent;
#   target/debug/shoal with --debug). The old commit is built in a worktree
#   with its own target directory (OLD_TARGET to keep it between runs):
#   a release build, or with --debug a debug one, quicker to build.
#   OLD_SHOAL=path/to/old/shoal: that commit's binary, built already (no
#   worktree, no build).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 OLD_COMMIT [--seconds N]" >&2; exit 2; }
OLD_COMMIT="$1"; shift
SECS=60
PROFILE=release
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS="$2"; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    *) echo "usage: $0 OLD_COMMIT [--seconds N] [--debug]" >&2; exit 2 ;;
  esac
done
BUILD=(--release)
[ "$PROFILE" = release ] || BUILD=()
NEW="${SHOAL:-$ROOT/target/$PROFILE/shoal}"
[ -x "$NEW" ] || (cd "$ROOT" && cargo build "${BUILD[@]}" -p shoal)
OUT="${TMPDIR:-/tmp}/shoal-upgrade-$$"
DIR="$OUT/cluster"
WT="$OUT/old-src"
mkdir -p "$OUT"
cleanup() {
  "$NEW" dev down --dir "$DIR" --wipe >/dev/null 2>&1 || true
  git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || true
  rm -rf "$OUT"
}
trap cleanup EXIT

if [ -n "${OLD_SHOAL:-}" ]; then
  OLD="$OLD_SHOAL"
else
  echo "building $OLD_COMMIT ..."
  git -C "$ROOT" worktree add --detach "$WT" "$OLD_COMMIT" >/dev/null
  (cd "$WT" && CARGO_TARGET_DIR="${OLD_TARGET:-$OUT/old-target}" cargo build "${BUILD[@]}" -p shoal --quiet)
  OLD="${OLD_TARGET:-$OUT/old-target}/$PROFILE/shoal"
fi
echo "old: $("$OLD" --version)"
echo "new: $("$NEW" --version)"

"$OLD" dev up --dir "$DIR" --osds 3 --store block --osd-bytes $((2 << 30)) --no-gateway --no-mgr >/dev/null
export SHOAL_CONF="$DIR/shoal.conf"
clean() {
  "$NEW" pg stat --format json | python3 -c 'import json,sys; v=json.load(sys.stdin); c=sum(s["num"] for s in v["num_pg_by_state"] if s["name"]=="active+clean"); sys.exit(0 if c==v["num_pgs"] else 1)'
}

# What the old build writes: objects with data, xattrs and omap; an image
# (header omap, object map) with a snapshot (clones in the OSDs' stores).
mkdir -p "$OUT/objs"
for i in $(seq 1 20); do
  head -c $(( (i * 37 % 16 + 1) * 65536 + i )) /dev/urandom > "$OUT/objs/o$i"
  "$OLD" rados -p rbd put "o$i" "$OUT/objs/o$i"
  "$OLD" rados -p rbd setxattr "o$i" note "object $i" >/dev/null
  "$OLD" rados -p rbd setomapval "o$i" key "value $i" >/dev/null
done
head -c $((24 << 20)) /dev/urandom > "$OUT/img.raw"
"$OLD" rbd import "$OUT/img.raw" img --no-progress >/dev/null
"$OLD" rbd snap create img@before >/dev/null
"$OLD" rbd bench img --io-type write --io-size 4K --io-total 4M --io-pattern rand >/dev/null

# The writer, then the OSDs replaced one at a time.
"$NEW" bench -p rbd "$SECS" write -b 4096 -t 16 --format json > "$OUT/writer.json" 2> "$OUT/writer.err" &
WRITER=$!
sleep 3
for id in 0 1 2; do
  pid="$(cat "$DIR/run/osd.$id.pid")"
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  t0=$(date +%s.%N)
  # As `shoal dev up` starts it (its own process group, the same log and
  # pid file, so that `dev down` stops it), with the new binary.
  setsid "$NEW" --conf "$DIR/shoal.conf" osd --id "$id" </dev/null >>"$DIR/out/osd.$id.log" 2>&1 &
  echo $! > "$DIR/run/osd.$id.pid"
  until "$NEW" osd dump --format json | python3 -c "import json,sys; v=json.load(sys.stdin); sys.exit(0 if any(o['osd']==$id and o['up'] for o in v['osds']) else 1)"; do sleep 0.5; done
  until clean; do sleep 0.5; done
  echo "osd.$id on the new build, active+clean after $(python3 -c "import time; print('%.1f s' % (time.time() - $t0))")"
done
if ! wait "$WRITER"; then
  echo "FAIL: the writer failed ops during the upgrade:" >&2
  cat "$OUT/writer.err" >&2
  exit 1
fi
python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print("writer: %d ops, %.0f IOPS, p99 %.1f ms, max %.1f ms, 0 failed" % (v["ops"], v["iops"], v["latency_p99_s"]*1e3, v["latency_max_s"]*1e3))' "$OUT/writer.json"

# Everything the old build wrote, read back by the new one.
for i in $(seq 1 20); do
  "$NEW" rados -p rbd get "o$i" "$OUT/back"
  cmp -s "$OUT/objs/o$i" "$OUT/back" || { echo "FAIL: o$i differs" >&2; exit 1; }
  [ "$("$NEW" rados -p rbd getxattr "o$i" note)" = "object $i" ] || { echo "FAIL: o$i's xattr" >&2; exit 1; }
  "$NEW" rados -p rbd getomapval "o$i" key "$OUT/omap"
  [ "$(cat "$OUT/omap")" = "value $i" ] || { echo "FAIL: o$i's omap" >&2; exit 1; }
done
"$NEW" rbd export img@before "$OUT/img.back" --no-progress >/dev/null
cmp -s "$OUT/img.raw" "$OUT/img.back" || { echo "FAIL: the image's snapshot differs" >&2; exit 1; }
echo "20 objects (data, xattrs, omap) and the image's snapshot read back intact"

"$NEW" dev down --dir "$DIR" >/dev/null
for id in 0 1 2; do
  "$NEW" store fsck --deep "$DIR/osd.$id/store" >/dev/null || { echo "FAIL: osd.$id's store" >&2; exit 1; }
done
echo "deep fsck of the three stores: clean"
echo "PASS: upgraded from $OLD_COMMIT in place"
