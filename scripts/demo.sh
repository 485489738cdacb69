#!/usr/bin/env bash
# The main job of pcached at this stage: set up, build, and print the copy calibration report of
# the pmem access layer on a file-backed region (a /dev/shm file standing in for pmem, with the
# real cache-flush instructions). Extra arguments go to the benchmark (e.g. --json, or --region
# /dev/dax0.0 on a machine with pmem).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/bench/pcached-copy-bench "$@"
