# Shared steps of the guest scripts (sourced; the harness runs them with sh -e).

# A devdax namespace of the given size on the emulated NVDIMM: /dev/dax0.0.
make_devdax() {
  ndctl disable-region all >/dev/null
  ndctl init-labels -f all >/dev/null
  ndctl enable-region all >/dev/null
  ndctl create-namespace -r region0 -m devdax -s "$1" >/dev/null
  test -c /dev/dax0.0
}

# An fsdax namespace of size $1 with ext4 on it, mounted with -o dax on $2; sets PMEM_DISK (pmem0).
mount_fsdax() {
  ndctl disable-region all >/dev/null
  ndctl init-labels -f all >/dev/null
  ndctl enable-region all >/dev/null
  ndctl create-namespace -r region0 -m fsdax -s "$1" >/dev/null
  PMEM_DISK=$(basename "$(ls /dev/pmem0* | head -1)")
  /sbin/mke2fs -q -t ext4 -b 4096 -F "/dev/$PMEM_DISK"
  mkdir -p "$2" && mount -t ext4 -o dax "/dev/$PMEM_DISK" "$2"
}

# Replaces the table of device-mapper device $1 with $2 under running I/O (the device stays open).
swap_dm_table() {
  dmsetup suspend --noudevsync "$1"
  dmsetup load "$1" --table "$2"
  dmsetup resume --noudevsync "$1"
}

# The value of metric $1 (a series without labels, or the first one) from the daemon's endpoint.
scrape_metric() { wget -qO- http://127.0.0.1:9469/metrics | grep "^$1{" | sed 's/.* //'; }

# Field $3 of section $2 of cache $1's status (JSON), e.g. status_field media badblocks ranges.
status_field() { pcached --json status "$1" | tr -d ' \n' | sed -n "s/.*\"$2\":{[^}]*\"$3\":\([0-9]*\).*/\1/p"; }

# Reads the $blocks 64 KiB blocks of $dev one by one. Those that fail are listed in $failed;
# every other one must hold the data of reference file $1.
read_all() {
  failed=""
  i=0
  while [ $i -lt $blocks ]; do
    if dd if="$dev" of=/tmp/block bs=64k skip=$i count=1 iflag=direct 2>/dev/null; then
      dd if="$1" of=/tmp/expected bs=64k skip=$i count=1 2>/dev/null
      cmp -s /tmp/block /tmp/expected || { echo "block $i reads back wrong data"; exit 1; }
    else
      failed="$failed $i"
    fi
    i=$((i + 1))
  done
  echo "blocks failing with EIO:${failed:- none}"
}

# Has the kernel take a 4 KiB page away as failed: 12 KiB into each 2 MiB of /dev/dax0.0 at the
# given MiB offsets (debugfs mounted). pcachedd maps the device in 2 MiB pages (its default
# alignment), so each is reported as 2 MiB, the extent the kernel unmaps. One at a time: SIGBUS is
# not a queued signal, so a report sent while the one before is still pending would be lost.
fail_chunks() {
  dax_base=$(cat /sys/bus/dax/devices/dax0.0/resource)
  for mib in "$@"; do
    echo $(((dax_base + mib * 1024 * 1024 + 12 * 1024) / 4096)) > /sys/kernel/debug/hwpoison/corrupt-pfn
    sleep 0.3
  done
}

# The set-up of the memory-failure tests: debugfs for hwpoison_inject, a 512 MiB devdax namespace,
# the virtio disk behind a dm-linear device `backing` (whose table the tests swap), and a fresh
# cache `mce` on them with 4 MiB segments; sets $sectors (of the disk) and $dev.
start_memory_failure_cache() {
  trap show_daemon_log EXIT
  ip link set lo up
  mount -t debugfs debugfs /sys/kernel/debug
  make_devdax 512M
  sectors=$(cat /sys/block/vda/size)
  # No udev in the guest: dmsetup makes the node itself.
  dmsetup create backing --noudevsync --table "0 $sectors linear /dev/vda 0"
  dmsetup mknodes backing
  start_daemon
  dev=$(pcached add --cache /dev/dax0.0 --backing /dev/mapper/backing --name mce --format --segment-size 4M \
        --set sequential_cutoff=0)
}

start_daemon() {
  pcachedd --state-dir /var/lib/pcached "$@" >/tmp/pcachedd.log 2>&1 &
  DAEMON_PID=$!
  for i in $(seq 100); do [ -S /run/pcached/pcached.sock ] && return 0; sleep 0.1; done
  cat /tmp/pcachedd.log
  return 1
}

show_daemon_log() {
  echo "---- pcachedd log"
  cat /tmp/pcachedd.log
  echo "----"
}

# Scenario 3's steps (guest_kill_recovery.sh; guest_legacy_opcodes.sh runs them on the legacy ublk
# opcodes): kill -9 of pcachedd while fio writes with verification through ext4; a new pcachedd
# recovers the same /dev/ublkb0 (user recovery); fio's verify passes; e2fsck is clean. After each
# start of the daemon, expect_log (a function of the caller's, if any) checks its log.
kill_recovery_scenario() {
  make_devdax 512M
  start_daemon
  if command -v expect_log >/dev/null; then expect_log; fi
  dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --queues 2)
  /sbin/mke2fs -q -t ext4 -F "$dev"
  mount -t ext4 "$dev" /mnt
  fio --name=crash --filename=/mnt/data --size=96M --rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=16 \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/tmp/fio.out 2>&1 &
  FIO=$!
  sleep 3
  kill -9 "$DAEMON_PID"
  echo "pcachedd killed during the write phase"
  sleep 1
  start_daemon
  if command -v expect_log >/dev/null; then expect_log; fi
  for i in $(seq 100); do pcached list 2>/dev/null | grep -q ublkb0 && break; sleep 0.1; done
  pcached list
  wait "$FIO" || { cat /tmp/fio.out; exit 1; }
  echo "fio verify passed across the daemon restart"
  umount /mnt
  /sbin/e2fsck -f -n "$dev"
  pcached remove cache0
}
