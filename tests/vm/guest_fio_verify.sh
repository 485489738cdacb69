# Scenario 1: a devdax namespace as the cache, the virtio disk as backing; fio writes with
# verification at several block sizes and reads everything back.
. /guest_lib.sh
trap show_daemon_log EXIT
make_devdax 512M
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --queues 2)
echo "cache device: $dev"
test -b "$dev"
for bs in 4k 64k 1m; do
  fio --name=verify-$bs --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite --bs=$bs \
      --size=96M --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/tmp/fio.out
  echo "fio $bs: verified"
done
pcached status cache0
pcached remove cache0
echo "fio verify passed"
