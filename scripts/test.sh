#!/usr/bin/env bash
# Runs every test of pcached: installs what is missing, builds, runs the suite in the normal
# build, the in-process tests again with ASan+UBSan and with ThreadSanitizer, then the fuzz
# targets briefly (clang). Exits non-zero if anything failed or did not run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh --deps

# Scratch files (emulated pmem regions, backing files) of test or benchmark processes that were
# killed before they could remove them: a run that timed out must not fill /dev/shm for the next.
sweep_scratch_files() {
  local file pid
  for file in /dev/shm/pcached-test-* /dev/shm/pcached-bench-*; do
    [[ -e $file ]] || continue
    if [[ $file == /dev/shm/pcached-test-* ]]; then
      pid=${file#/dev/shm/pcached-test-}; pid=${pid%%-*}
    else
      pid=${file##*-}
    fi
    [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -f "$file"
  done
  return 0
}
sweep_scratch_files

run_suite() {
  local dir=$1 suites=$2
  shift 2
  if [[ ! -f "$dir/build.ninja" ]]; then
    meson setup "$dir" "$@"
  fi
  rm -f "$dir/meson-logs/testlog.json"  # a failed build must not leave an old result to count
  meson compile -C "$dir"
  # shellcheck disable=SC2086
  meson test -C "$dir" --print-errorlogs --num-processes 2 $suites
}

status=0
# Everything, including the end-to-end tests in the VM.
run_suite build "" --buildtype=debugoptimized || status=1
# The in-process tests again under ASan+UBSan (b_lundef=false: the sanitizer runtimes resolve
# symbols at load time). The VM suite runs once, above.
run_suite build-asan "--no-suite vm" --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false || status=1
# And under ThreadSanitizer, for data races between queue threads, writeback and GC (tests/
# meson.build makes the first report fail the test and scales the long tests down).
run_suite build-tsan "--no-suite vm" --buildtype=debug -Db_sanitize=thread -Db_lundef=false || status=1

# The fuzz targets (tests/fuzz/): clang with ASan+UBSan, each run briefly from its seed corpus.
# Only the fuzz targets are built here; scripts/fuzz.sh runs the longer campaigns.
run_fuzz() {
  if [[ ! -f build-fuzz/build.ninja ]]; then
    CXX=clang++ meson setup build-fuzz -Dfuzzing=true --buildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false
  fi
  rm -f build-fuzz/meson-logs/testlog.json
  # (&&: errexit does not apply inside a function called with ||; a failed build must not test.)
  meson compile -C build-fuzz fuzz &&
    meson test -C build-fuzz --no-rebuild --print-errorlogs --num-processes 2 --suite fuzz
}
run_fuzz || status=1

# One closing line over all builds, counted from meson's own logs.
if python3 - <<'PY'
import json, pathlib, sys
passed = 0
failures = []
for build in ("build", "build-asan", "build-tsan", "build-fuzz"):
    path = pathlib.Path(build, "meson-logs", "testlog.json")
    if not path.exists():
        failures.append(f"{build}: no test log (the build failed or did not run)")
        continue
    for line in path.read_text().splitlines():
        test = json.loads(line)
        if test["result"] == "OK":
            passed += 1
        else:
            failures.append(f"{build}: {test['name']} {test['result']}")
# Named here too: the end of a long log is what a CI report keeps.
for failure in failures:
    print(f"FAILED {failure}")
print(f"tests: {passed} passed, {len(failures)} failed")
# A test meson counts as skipped (exit status 77) or a build whose log is missing fails the run
# too, even where meson itself exited 0.
sys.exit(1 if failures else 0)
PY
then :; else status=1; fi
exit $status
