# Memory failures under the journals of a running devdax cache (guest_memory_failure.sh covers its
# data). The failed pages hold the journals' segment headers and every key set written so far, and
# the place each journal's next key set goes: a queue that went on writing its journal there would
# store onto a page the kernel took away, and the daemon would die of it. Instead each queue starts
# a new journal elsewhere, and writeback writes back the dirty data whose keys were on the failed
# pages from the index: nothing is lost, and after `remove` the backing disk alone holds it all.
. /guest_lib.sh
blocks=384  # 64 KiB each: 24 MiB
start_memory_failure_cache
# The backing device fails every write (a dm error table): all the data stays dirty in the cache.
swap_dm_table backing "0 $sectors error"
dd if=/dev/urandom of=/tmp/data bs=64k count=$blocks 2>/dev/null
dd if=/tmp/data of="$dev" bs=64k oflag=direct 2>/dev/null
# A fresh cache's journals take its first free segments: with 4 MiB segments from 10 MiB on and the
# guest's two queues, 10-14 and 14-18 MiB. Their first 2 MiB hold the headers and all the key sets.
fail_chunks 10 14
kill -0 "$DAEMON_PID"
[ "$(status_field mce badblocks ranges)" = 2 ] || { pcached status mce; exit 1; }
# New data over the first third, from both CPUs (each submits to its own queue).
dd if=/dev/urandom of=/tmp/new bs=64k count=128 2>/dev/null
dd if=/tmp/new of=/tmp/data bs=64k conv=notrunc 2>/dev/null
taskset -c 0 dd if=/tmp/new of="$dev" bs=64k count=64 oflag=direct 2>/dev/null
taskset -c 1 dd if=/tmp/new of="$dev" bs=64k skip=64 seek=64 count=64 oflag=direct 2>/dev/null
kill -0 "$DAEMON_PID"
switched=$(grep -c "the queue's keys go to journal" /tmp/pcachedd.log || true)
[ "$switched" -ge 1 ] || { echo "no queue moved to a new journal"; exit 1; }
read_all /tmp/data
[ -z "$failed" ] || exit 1
echo "after the failures under both journals: $switched queue(s) on a new journal, every block reads back"

# The backing device is back: writeback goes past the journals' failed pages, taking those keys'
# data from the index.
swap_dm_table backing "0 $sectors linear /dev/vda 0"
pcached flush mce
grep -q "cannot be read" /tmp/pcachedd.log || { echo "writeback never met the failed journal pages"; exit 1; }
[ "$(status_field mce lost ranges)" = 0 ] || { pcached status mce; exit 1; }
read_all /tmp/data
[ -z "$failed" ] || exit 1
pcached remove mce
kill -0 "$DAEMON_PID"
dmsetup remove --noudevsync backing
cmp -n $((blocks * 65536)) /dev/vda /tmp/data
echo "memory failures under the journals: the daemon lived, every write reached the backing disk"
