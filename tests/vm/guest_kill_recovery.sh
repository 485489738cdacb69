# Scenario 3: kill -9 of pcachedd while fio writes with verification through ext4; a new
# pcachedd recovers the same /dev/ublkb0 (user recovery); fio's verify passes; e2fsck is clean.
. /guest_lib.sh
trap show_daemon_log EXIT
make_devdax 512M
start_daemon
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
for i in $(seq 100); do pcached list 2>/dev/null | grep -q ublkb0 && break; sleep 0.1; done
pcached list
wait "$FIO" || { cat /tmp/fio.out; exit 1; }
echo "fio verify passed across the daemon restart"
umount /mnt
/sbin/e2fsck -f -n "$dev"
pcached remove cache0
echo "kill -9 recovery passed"
