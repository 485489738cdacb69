# Media errors on real pmem. Bad blocks are injected into the fsdax namespace under the cache's
# file (/sys/block/pmem0/badblocks: the pmem driver refuses DAX faults on them, so a load from
# such a page raises SIGBUS, and libpmem2 reports them through libndctl, mapped to the file by
# FIEMAP). pcachedd stays up; reads of dirty data that is gone fail with EIO, at once and after
# writeback and across attaches, never returning the backing device's older data; segments with bad
# pages are retired; a rewrite makes the sectors whole again and writeback then completes.
. /guest_lib.sh
trap show_daemon_log EXIT
ip link set lo up
mount_fsdax 512M /pmem
dd if=/dev/zero of=/pmem/cache.img bs=1M count=128 2>/dev/null
sectors=$(cat /sys/block/vda/size)
# No udev in the guest: dmsetup makes the node itself.
dmsetup create backing --noudevsync --table "0 $sectors linear /dev/vda 0"
dmsetup mknodes backing

segment_size=$((4 * 1024 * 1024))
blocks=384  # 64 KiB each: 24 MiB
add_cache() {
  dev=$(pcached add --cache /pmem/cache.img --backing /dev/mapper/backing --name media --set sequential_cutoff=0 "$@")
}

# Poisons 4 KiB of the cache file at offset $1 (bytes): its fs block's sectors on the namespace.
poison() {
  block=$(($1 / 4096))
  physical=$(filefrag -v /pmem/cache.img | tr '.:' '  ' |
             awk -v want=$block '$1 ~ /^[0-9]+$/ && NF >= 6 && want >= $2 && want <= $3 { print $4 + want - $2 }')
  [ -n "$physical" ] || { filefrag -v /pmem/cache.img; exit 1; }
  echo "$((physical * 8)) 8" > /sys/block/$PMEM_DISK/badblocks
  echo "poisoned the cache file at $1 (namespace sector $((physical * 8)))"
}

# The offsets of pages 1 MiB into the data segments that hold data (never written pages of the
# zero-filled file read as zeros): pages of request data, away from the segments' headers.
data_pages() {
  segment=0
  while :; do
    offset=$((10 * 1024 * 1024 + segment * segment_size))
    [ $((offset + segment_size)) -le $((128 * 1024 * 1024)) ] || break
    type=$(dd if=/pmem/cache.img bs=4k skip=$((offset / 4096)) count=1 2>/dev/null | od -An -tu4 -N12 | awk '{ print $1, $3 }')
    page=$((offset + 1024 * 1024))
    if [ "$type" = "1195725648 1" ] &&
       [ "$(dd if=/pmem/cache.img bs=4k skip=$((page / 4096)) count=1 2>/dev/null | tr -d '\0' | wc -c)" -gt 0 ]; then
      echo $page
    fi
    segment=$((segment + 1))
  done
}

start_daemon
add_cache --format --segment-size 4M
# Everything stays dirty: writeback cannot reach the device (a dm error table) until it returns.
dd if=/dev/urandom of=/tmp/ref bs=64k count=$blocks 2>/dev/null
swap_dm_table backing "0 $sectors error"
dd if=/tmp/ref of="$dev" bs=64k oflag=direct 2>/dev/null
pcached remove media --no-flush
pages=$(data_pages)
set -- $pages
[ $# -ge 3 ] || { echo "fewer than three data segments hold data: $pages"; exit 1; }
first=$1 second=$2 third=$3

# Known before the attach: libpmem2 reports it. Injected after the attach, before anything read
# the page: the SIGBUS of the first load from it reports it.
poison "$first"
add_cache
[ "$(status_field media badblocks ranges)" = 1 ] || { pcached status media; exit 1; }
poison "$second"
read_all /tmp/ref
kill -0 "$DAEMON_PID"
set -- $failed
[ $# = 2 ] || { echo "expected the blocks of two poisoned pages to fail, not:$failed"; exit 1; }
dirty_lost=$failed
grep -q "media error at offset" /tmp/pcachedd.log
[ "$(scrape_metric pcached_pmem_bad_ranges)" = 2 ] || { pcached status media; exit 1; }
echo "dirty data on bad pages fails its reads; the daemon is up"

# Writeback cannot read that data: it is recorded as lost, and its reads keep failing once the
# backing device (which holds older data there) is back.
swap_dm_table backing "0 $sectors linear /dev/vda 0"
pcached flush media
pcached status media
[ "$(status_field media lost ranges)" -ge 1 ] || exit 1
read_all /tmp/ref
[ "$failed" = "$dirty_lost" ] || { echo "after writeback, failing:$failed (before:$dirty_lost)"; exit 1; }
echo "after writeback: the lost data still fails, everything else was written back"

# Attached again (only dirty data is replayed: the clean data comes back as read misses), with a
# third bad page in a segment that is free now: the lost ranges still fail, the segments with bad
# pages are retired, and the misses are filled into the others and read back whole.
pcached remove media --no-flush
poison "$third"
add_cache
[ "$(status_field media badblocks ranges)" = 3 ] || { pcached status media; exit 1; }
[ "$(status_field media segments bad)" = 3 ] || { pcached status media; exit 1; }
read_all /tmp/ref
[ "$failed" = "$dirty_lost" ] || { echo "after a new attach, failing:$failed"; exit 1; }
read_all /tmp/ref
[ "$failed" = "$dirty_lost" ] || { echo "read again from the cache, failing:$failed"; exit 1; }
[ "$(status_field media reads hits)" -gt 0 ] || { pcached status media; exit 1; }
echo "attached again: the lost data still fails; bad segments retired; everything else reads back"

# Rewritten, the lost blocks read back; writeback completes; the backing disk alone holds it all.
for i in $dirty_lost; do dd if=/tmp/ref of="$dev" bs=64k skip=$i seek=$i count=1 oflag=direct conv=notrunc 2>/dev/null; done
read_all /tmp/ref
[ -z "$failed" ] || exit 1
[ "$(status_field media lost ranges)" = 0 ] || { pcached status media; exit 1; }
pcached remove media
dmsetup remove --noudevsync backing
cmp -n $((blocks * 65536)) /dev/vda /tmp/ref
echo "media errors: nothing served wrong, nothing lost that was not on the bad pages"
