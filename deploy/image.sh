#!/usr/bin/env bash
# Builds the container image `shoal:TAG` from the `shoal` binary, with no
# registry: `FROM scratch`, the binary (stripped) and the shared libraries
# `ldd` names, a passwd and hosts file, and empty /tmp and /var/lib/shoal.
# One image runs any daemon: `docker run shoal:dev mon|osd|gateway|mgr|nbd ...`
# (the entry point is the binary; configuration comes from arguments,
# `--set`, or a file mounted in the container and named by `--conf`).
#
# Usage: deploy/image.sh [--tag TAG] [--binary PATH]
#   default binary: target/release/shoal (build it first:
#   cargo build --release -p shoal); default tag: dev
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TAG=dev
BIN="$ROOT/target/release/shoal"
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --binary) BIN="$2"; shift 2 ;;
    *) echo "usage: $0 [--tag TAG] [--binary PATH]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "$0: no binary at $BIN (cargo build --release -p shoal)" >&2; exit 1; }
command -v docker >/dev/null || { echo "$0: no docker" >&2; exit 1; }

CTX="$(mktemp -d "${TMPDIR:-/tmp}/shoal-image.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT
R="$CTX/root"
mkdir -p "$R/usr/local/bin" "$R/etc/shoal" "$R/tmp" "$R/var/lib/shoal"
chmod 1777 "$R/tmp"
cp "$BIN" "$R/usr/local/bin/shoal"
strip "$R/usr/local/bin/shoal" 2>/dev/null || true
# The loader and every library the binary links, at the paths ldd gives.
for lib in $(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
  mkdir -p "$R$(dirname "$lib")"
  cp -L "$lib" "$R$lib"
done
echo "root:x:0:0:root:/root:/nonexistent" > "$R/etc/passwd"
echo "root:x:0:" > "$R/etc/group"
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
cat > "$CTX/Dockerfile" <<'END'
FROM scratch
COPY root/ /
ENTRYPOINT ["/usr/local/bin/shoal"]
END
docker build -q -t "shoal:$TAG" "$CTX" >/dev/null
docker run --rm "shoal:$TAG" --version
echo "built shoal:$TAG"
