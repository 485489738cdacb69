#!/usr/bin/env bash
# A longer crash campaign than the test suite's: N SIGKILL points and N simulated power cuts
# (default 1000 each). The power cuts are split over four runs: three copy policies, and a
# workload that fits in the cache, so that GC moves data; they rotate strict cuts, random shares
# of unflushed lines kept, and kept lines torn at 8-byte granularity. Each is followed by recovery
# and a check of every sector against the reference model. Prints the totals.
#   scripts/crash-campaign.sh [N] [SEED]
# SEED (default 0) varies the workloads from one campaign to the next. The log and, after a
# failure, the region and backing images it was found on are kept in build/crash-campaign/.
set -euo pipefail
cd "$(dirname "$0")/.."
points=${1:-1000}
seed=${2:-0}
scripts/setup.sh

out=build/crash-campaign
mkdir -p "$out"
rm -f "$out/region" "$out/backing"
log="$out/campaign-$(date +%Y%m%d-%H%M%S).log"
start=$SECONDS
status=0
PCACHED_CRASH_POINTS="$points" PCACHED_CRASH_SEED="$seed" PCACHED_CRASH_DUMP_DIR="$out" \
  build/tests/pcached-unit-tests '[crash]' --durations yes 2>&1 | tee "$log" || status=1

# One line per kind of crash, summed over the tests' own totals lines.
python3 - "$log" "$((SECONDS - start))" "$status" <<'PY'
import re, sys
log, elapsed, status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pattern = re.compile(r"(\d+) crash points, (\d+) acknowledged operations .*?, (\d+) bytes compared .*?"
                     r"losses=(\d+), wrong=(\d+)")
totals = {"power cuts": [0] * 5, "SIGKILL": [0] * 5}
for line in open(log):
    for kind in totals:
        if line.startswith(kind):
            match = pattern.search(line)
            if match:
                totals[kind] = [a + int(b) for a, b in zip(totals[kind], match.groups())]
for kind, (points, acknowledged, compared, losses, wrong) in totals.items():
    print(f"campaign {kind}: {points} crash points, {acknowledged} acknowledged operations checked, "
          f"{compared} bytes compared, losses={losses}, wrong={wrong}")
print(f"campaign: {'passed' if status == 0 else 'FAILED'} in {elapsed} s; log {log}")
PY
exit $status
