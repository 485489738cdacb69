#!/usr/bin/env bash
# Runs one fuzz target for the meson suite "fuzz": it starts from the committed seeds and writes
# what it finds (new inputs, crash reproducers) under the build directory, never into the source
# tree. Each run starts afresh.
#   run_fuzzer.sh <target> <seed directory> <work directory> [libFuzzer options...]
set -euo pipefail
target=$1 seeds=$2 work=$3
shift 3
rm -rf "$work"
mkdir -p "$work/corpus"
# libFuzzer reports a crash or a failed property with exit status 77 by default, which meson takes
# for a skipped test: any finding must fail the test.
exec "$target" -artifact_prefix="$work/" -error_exitcode=1 -timeout_exitcode=1 "$@" "$work/corpus" "$seeds"
