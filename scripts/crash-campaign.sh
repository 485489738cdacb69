#!/usr/bin/env bash
# A longer crash campaign than the test suite's: N SIGKILL points and N simulated power cuts
# (default 5000 each), each followed by recovery and a full check.
#   scripts/crash-campaign.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PCACHED_CRASH_POINTS="${1:-5000}" build/tests/pcached-unit-tests '[crash]'
