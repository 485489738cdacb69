#!/usr/bin/env python3
"""Scenario 4, a power cut: qemu is SIGKILLed while the guest writes through /dev/ublkb0; the next
boot attaches the cache again from the same NVDIMM file, and every write the guest saw
acknowledged before the cut (logged on the console) reads back."""
import os
import random
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vm as harness  # noqa: E402

WRITER = r"""
. /guest_lib.sh
make_devdax 512M
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format)
i=0
while true; do
  i=$((i + 1))
  yes "block-$i" | head -c 4096 > /tmp/block
  dd if=/tmp/block of="$dev" bs=4096 seek=$i count=1 conv=fsync 2>/dev/null
  echo "ACK $i"
done
"""

CHECKER = r"""
. /guest_lib.sh
trap show_daemon_log EXIT
test -c /dev/dax0.0
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda)
pcached status cache0 | grep -E "cached|dirty"
bad=0
for i in $(seq 1 LAST); do
  yes "block-$i" | head -c 4096 > /tmp/expected
  dd if="$dev" of=/tmp/got bs=4096 skip=$i count=1 2>/dev/null
  cmp -s /tmp/got /tmp/expected || { echo "block $i lost"; bad=$((bad + 1)); }
done
echo "acknowledged blocks checked: LAST, lost: $bad"
test "$bad" -eq 0
"""


def main():
    binaries = sys.argv[1:]
    machine = harness.Vm()
    scratch = tempfile.mkdtemp(prefix="pcached-powercut-", dir="/dev/shm")
    try:
        pmem, disk = os.path.join(scratch, "pmem.img"), os.path.join(scratch, "disk.img")
        harness.make_file(pmem, 1 << 30)
        harness.make_file(disk, 256 << 20)
        cut_at = random.randint(40, 200)
        writer = os.path.join(scratch, "writer.sh")
        with open(writer, "w") as f:
            f.write(WRITER)
        first = machine.run(writer, pmem, disk, binaries=binaries, timeout=600, kill_when=rf"^ACK {cut_at}$")
        acks = [int(m.group(1)) for m in re.finditer(r"^ACK (\d+)$", first.output, re.M)]
        if not acks:
            print("power cut: the writer never acknowledged a write", file=sys.stderr)
            return 1
        last = max(acks)
        print(f"power cut after {last} acknowledged writes", flush=True)
        checker = os.path.join(scratch, "checker.sh")
        with open(checker, "w") as f:
            f.write(CHECKER.replace("LAST", str(last)))
        second = machine.run(checker, pmem, disk, binaries=binaries, timeout=600)
        return 0 if second.status == 0 else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
