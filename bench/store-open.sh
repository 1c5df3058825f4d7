#!/usr/bin/env bash
# A BlockStore holding a million objects opens within a stated time and
# memory (issue 38 point 1: the object index is rebuilt in memory at every
# open). Makes a store of N objects (default 1 000 000; each 4 KiB of data
# and a 256-byte xattr, an RBD data object and its object info), closes it,
# and opens it in a fresh process: the run fails when the open takes more
# than MAX_OPEN_SECS (default 10) or holds more than MAX_BYTES_PER_OBJECT
# resident (default 1 200). docs/design/objectstore.md ("Figures") gives
# the figures these limits guard.
#
# Usage: bench/store-open.sh [N] [DIR]   (DIR: where the store is made, default /tmp;
#   it needs ~N × 8 KiB of sparse data and ~1.3 KiB of metadata per object)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N=${1:-1000000}
DIR=${2:-/tmp}
MAX_OPEN_SECS=${MAX_OPEN_SECS:-10}
MAX_BYTES_PER_OBJECT=${MAX_BYTES_PER_OBJECT:-1200}
cd "$ROOT"
cargo build --release -q -p shoal-objectstore --example bench
exec target/release/examples/bench "$DIR" --objects "$N" \
  --max-open-secs "$MAX_OPEN_SECS" --max-bytes-per-object "$MAX_BYTES_PER_OBJECT"
