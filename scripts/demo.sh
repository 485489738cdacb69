#!/usr/bin/env bash
# The main job: set up, build, print the copy-policy calibration of the pmem layer, then run a
# demo cache device: file-backed pmem and a backing file behind /dev/ublkbN, a short verified fio
# workload, status, teardown. On a kernel with ublk it runs here; on one without (like this
# project's build machines) it runs inside the test VM (qemu, Debian's 6.12 kernel, an emulated
# NVDIMM backed by a file).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "=== copy calibration of the pmem access layer (a /dev/shm file standing in for pmem)"
build/bench/pcached-copy-bench --size 256M

if modprobe ublk_drv 2>/dev/null && [[ -e /dev/ublk-control ]]; then
  echo "=== demo cache device on this host"
  work=$(mktemp -d /var/tmp/pcached-demo.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  truncate -s 256M "$work/pmem.img"
  truncate -s 512M "$work/backing.img"
  PATH="$PWD/build/daemon:$PWD/build/cli:$PATH" REGION="$work/pmem.img" BACKING="$work/backing.img" \
    ADD_FLAGS="--allow-volatile-region --allow-volatile-writeback --segment-size 4M" scripts/demo-workload.sh
else
  echo "=== this kernel has no ublk: running the demo inside the test VM"
  exec python3 tests/vm/vm.py run tests/vm/guest_demo.sh --binary build/daemon/pcachedd --binary build/cli/pcached \
    --binary scripts/demo-workload.sh
fi
