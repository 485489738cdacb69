#!/usr/bin/env bash
# A longer soak than the test suite's vm-soak (issue 7): MINUTES of mixed random I/O with
# verification on a 2-queue /dev/ublkb0 in the VM (default 30), with writeback and GC running all
# along and RESTARTS daemon restarts spread over it (default 4: SIGTERM and kill -9 in turn, each
# followed by user recovery while fio keeps going). Prints pcachedd's RSS every 5 s and fails on
# a verify error, a hang, writeback or GC that never ran, or memory that grows once warmed up.
# The scenario is tests/vm/guest_soak.sh; the log is kept in build/soak/.
#   scripts/soak.sh [MINUTES] [RESTARTS]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
restarts=${2:-4}
scripts/setup.sh

out=build/soak
mkdir -p "$out"
log="$out/soak-$(date +%Y%m%d-%H%M%S).log"
start=$SECONDS
status=0
# The guest's time limit: the soak, then the last passes (each bounded in the guest), boot and
# teardown, with room for a loaded host.
python3 tests/vm/vm.py run tests/vm/guest_soak.sh --binary build/daemon/pcachedd --binary build/cli/pcached \
  --timeout $((minutes * 60 + 1200)) \
  --append "pcached_soak_seconds=$((minutes * 60)) pcached_soak_restarts=$restarts" 2>&1 | tee "$log" || status=1

grep -E "soak: (totals|highest|generation|restart .* recovered|[0-9]+ s of I/O)" "$log" | sed 's/^guest| //' || true
echo "soak: $( ((status == 0)) && echo passed || echo FAILED) in $((SECONDS - start)) s; log $log"
exit $status
