#!/usr/bin/env bash
# A longer fuzzing campaign than the test suite's: runs every fuzz target (or those named) for
# SECONDS each (default 600), from its committed corpus, then merges the inputs that reach new
# code (new edges) into tests/fuzz/corpus/<target>/ (commit them). Crash, leak and timeout
# reproducers stay in build-fuzz/campaign/<target>/; the script exits non-zero if there are any.
# docs/fuzzing.md says more.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --seeds        rewrite the generated seeds (each target writes its own)
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(superblock control_area segment_header key_set engine_open protocol state_file)

scripts/setup.sh --deps
if [[ ! -f build-fuzz/build.ninja ]]; then
  CXX=clang++ meson setup build-fuzz -Dfuzzing=true --buildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false
fi
meson compile -C build-fuzz fuzz

export ASAN_OPTIONS=handle_sigbus=0:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

if [[ "${1:-}" == "--seeds" ]]; then
  for target in "${all_targets[@]}"; do
    PCACHED_FUZZ_WRITE_SEEDS=tests/fuzz/corpus "build-fuzz/tests/fuzz/${target}_fuzz"
  done
  echo "fuzz: seeds written to tests/fuzz/corpus/"
  exit 0
fi

seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")

status=0
summary=()
for target in "${targets[@]}"; do
  binary="build-fuzz/tests/fuzz/${target}_fuzz"
  corpus="tests/fuzz/corpus/$target"
  work="build-fuzz/campaign/$target"
  [[ -x "$binary" ]] || { echo "fuzz: no target $target (known: ${all_targets[*]})" >&2; exit 2; }
  rm -rf "$work"
  mkdir -p "$work/new"
  # The JSON parsers take messages up to the protocol's 64 KiB; the binary inputs are small.
  options=(-max_len=4096)
  [[ "$target" == protocol || "$target" == state_file ]] && options=(-max_len=66000 -dict=tests/fuzz/json.dict)
  echo "fuzz: $target for ${seconds}s"
  "$binary" -max_total_time="$seconds" -timeout=10 "${options[@]}" -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/new" "$corpus" >"$work/log" 2>&1 || true
  before=$(find "$corpus" -type f | wc -l)
  # Keeps the inputs that reach new edges (not merely new hit counts): the corpus stays small.
  "$binary" -merge=1 -use_counters=0 "${options[0]}" "$corpus" "$work/new" >"$work/merge.log" 2>&1
  after=$(find "$corpus" -type f | wc -l)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
  coverage=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/log" | tail -1)
  findings=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  ((findings == 0)) || status=1
  summary+=("$(printf '%-15s %12s runs %8s/s  %-22s corpus +%d  findings %d' "$target" "${runs:-?}" "${rate:-?}" \
    "${coverage:-?}" $((after - before)) "$findings")")
done

printf '%s\n' "${summary[@]}"
((status == 0)) || echo "fuzz: reproducers are in build-fuzz/campaign/<target>/ (run the target on one to see it)"
exit $status
