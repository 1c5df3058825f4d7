#!/usr/bin/env bash
# The whole product at once under faults for a bounded time: see the
# docstring of bench/soak.py (the same arguments; `--minutes N` required).
exec python3 "$(dirname "$0")/soak.py" "$@"
