# Scenarios 2 and 5: ext4 on /dev/ublkbN, files with known checksums, remount and e2fsck; remove
# refused while the device is mounted or open; then remove the cache (writing everything back) and
# find the same files on the backing disk alone.
. /guest_lib.sh
trap show_daemon_log EXIT
make_devdax 512M
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format)
/sbin/mke2fs -q -t ext4 -F "$dev"
mount -t ext4 "$dev" /mnt
for i in $(seq 1 20); do
  dd if=/dev/urandom of=/mnt/file$i bs=64k count=$((i * 3)) 2>/dev/null
done
mkdir /mnt/dir && cp /mnt/file7 /mnt/dir/copy7
(cd /mnt && md5sum file* dir/copy7 > /tmp/sums)
umount /mnt
/sbin/e2fsck -f -n "$dev"
mount -t ext4 "$dev" /mnt
(cd /mnt && md5sum -c /tmp/sums >/dev/null)
echo "remounted: checksums match"
# A device in use is not pulled out from under its users: remove is refused, and the device, the
# daemon and the filesystem go on.
refused_in_use() {
  if pcached remove cache0 2>/tmp/refusal; then echo "remove succeeded although $1"; exit 1; fi
  cat /tmp/refusal
  grep -q "is in use: $2" /tmp/refusal
  kill -0 "$DAEMON_PID"
  pcached list | grep -q ublkb0
}
refused_in_use "ext4 is mounted on $dev" "a filesystem is mounted on it"
# Nor does a daemon leaving with --remove-on-exit: the device stays for the next one to recover.
kill "$DAEMON_PID" && wait "$DAEMON_PID"
start_daemon --remove-on-exit
for i in $(seq 100); do pcached list 2>/dev/null | grep -q ublkb0 && break; sleep 0.1; done
kill "$DAEMON_PID" && wait "$DAEMON_PID"
grep -q "1 cache(s) could not be removed" /tmp/pcachedd.log
start_daemon
for i in $(seq 100); do pcached list 2>/dev/null | grep -q ublkb0 && break; sleep 0.1; done
(cd /mnt && md5sum -c /tmp/sums >/dev/null)
umount /mnt
exec 3<"$dev"
refused_in_use "a program has $dev open" "process [0-9]* (sh) has it open"
exec 3<&-
echo "remove refused while mounted and while open"
pcached remove cache0
# The cache is gone: the backing disk alone must hold every byte.
/sbin/e2fsck -f -n /dev/vda
mount -t ext4 /dev/vda /mnt
(cd /mnt && md5sum -c /tmp/sums >/dev/null)
umount /mnt
echo "backing disk alone holds all the data"
