# Issue 7: the backing device goes away under a running cache (its device-mapper table is swapped
# for `error`) and comes back. pcachedd stays up, keeps taking writes into pmem, reports the
# stalled writeback in status and metrics, refuses a remove that would need the device, and
# writes everything back once the device returns: the backing disk alone then holds all the data.
. /guest_lib.sh
trap show_daemon_log EXIT
ip link set lo up
make_devdax 512M
sectors=$(cat /sys/block/vda/size)
# No udev in the guest: dmsetup makes the node itself.
dmsetup create backing --noudevsync --table "0 $sectors linear /dev/vda 0"
dmsetup mknodes backing
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/mapper/backing --format --queues 2)

# fio job for region $1 (offset) with pattern $2; the rest of the arguments are fio options. Random
# writes (the same sequence each time) stay in the cache, below the sequential cutoff.
job() {
  offset=$1 seed=$2
  shift 2
  fio --name=region-$offset --filename="$dev" --offset="$offset" --size=48M --bs=64k --rw=randwrite --direct=1 \
      --ioengine=libaio --iodepth=8 --verify=crc32c --verify_pattern="$seed" --output-format=terse "$@" >/tmp/fio.out 2>&1 ||
    { cat /tmp/fio.out; return 1; }
}
status_json() { pcached --json status cache0 | tr -d ' \n'; }

job 0 0x11111111 --do_verify=0
pcached flush cache0
echo "region A written and written back"

swap_dm_table backing "0 $sectors error"
echo "backing device gone (dm error target)"

job 64M 0x22222222 --do_verify=0
echo "region B written into the cache while the backing device is gone"
for i in $(seq 150); do status_json | grep -q '"stalled":true' && break; sleep 0.2; done
status_json | grep -q '"stalled":true' || { pcached status cache0; exit 1; }
pcached status cache0
errors=$(scrape_metric pcached_writeback_errors_total)
stalled=$(scrape_metric pcached_writeback_stalled)
echo "metrics: pcached_writeback_errors_total=$errors pcached_writeback_stalled=$stalled"
[ "$stalled" = 1 ] || exit 1
[ "$errors" -gt 0 ] || exit 1
kill -0 "$DAEMON_PID"
job 0 0x11111111 --verify_only
job 64M 0x22222222 --verify_only
echo "both regions read back from the cache"

if pcached remove cache0 >/tmp/remove.out 2>&1; then
  echo "remove succeeded although the dirty data cannot be written back"
  exit 1
fi
cat /tmp/remove.out
grep -q "keeps running" /tmp/remove.out
test -b "$dev"
pcached list | grep -q ublkb0
echo "remove refused; the device keeps running"

swap_dm_table backing "0 $sectors linear /dev/vda 0"
echo "backing device back"
pcached flush cache0
status_json | grep -q '"stalled":false'
[ "$(scrape_metric pcached_writeback_stalled)" = 0 ] || exit 1
pcached remove cache0
dmsetup remove --noudevsync backing
# The backing disk alone: both regions as written.
dev=/dev/vda
job 0 0x11111111 --verify_only
job 64M 0x22222222 --verify_only
echo "backing fault: no data lost, everything written back after the device returned"
