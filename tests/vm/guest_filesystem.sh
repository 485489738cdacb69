# Scenarios 2 and 5: ext4 on /dev/ublkbN, files with known checksums, remount and e2fsck; then
# remove the cache (writing everything back) and find the same files on the backing disk alone.
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
umount /mnt
pcached remove cache0
# The cache is gone: the backing disk alone must hold every byte.
/sbin/e2fsck -f -n /dev/vda
mount -t ext4 /dev/vda /mnt
(cd /mnt && md5sum -c /tmp/sums >/dev/null)
umount /mnt
echo "backing disk alone holds all the data"
