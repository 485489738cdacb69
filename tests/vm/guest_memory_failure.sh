# Memory failures on a devdax cache, reported by the kernel while pcachedd runs. hwpoison_inject's
# corrupt-pfn runs the kernel's memory-failure handling on a page of /dev/dax0.0, as a machine check
# found by a patrol scrub would: the page is unmapped from every process, and those that asked for
# early reports (pcachedd does, PR_MCE_KILL_EARLY) get SIGBUS with BUS_MCEERR_AO. pcachedd stays up
# and marks the page bad: clean data there is read from the backing device, dirty data fails its
# reads with EIO (never the backing device's older data) and is recorded as lost by writeback, and
# rewritten data goes elsewhere. (The emulated NVDIMM holds no real poison, so without the report
# every read would still succeed: only the report can make these checks pass.)
. /guest_lib.sh
# A fresh cache's journals take its first free segments and its data the ones after, in order:
# with 4 MiB segments from 10 MiB on and the guest's two queues, journals in 10-18 MiB, the clean
# data in 18-46 MiB, then the fills of its misses, then the dirty data. The chunks failed below
# are well inside the data.
blocks=384  # 64 KiB each: 24 MiB
start_memory_failure_cache
grep -q "cannot ask for early memory-failure reports" /tmp/pcachedd.log && exit 1

# Clean data: written back, still cached (the second read hits), then its pages fail. Every block
# still reads back whole: the failed pages' data comes from the backing device.
dd if=/dev/urandom of=/tmp/clean bs=64k count=$blocks 2>/dev/null
dd if=/tmp/clean of="$dev" bs=64k oflag=direct 2>/dev/null
pcached flush mce
read_all /tmp/clean
fail_chunks 26 30 34
kill -0 "$DAEMON_PID"
[ "$(status_field mce badblocks ranges)" = 3 ] || { pcached status mce; exit 1; }
[ "$(status_field mce badblocks bytes)" = $((3 * 2 * 1024 * 1024)) ] || { pcached status mce; exit 1; }
[ "$(grep -c "memory failure reported at offset" /tmp/pcachedd.log)" = 3 ] || exit 1
hits_before=$(status_field mce reads hits)
read_all /tmp/clean
[ -z "$failed" ] || exit 1
# The blocks with data in the 6 MiB failed (up to 96; at least one 2 MiB worth) no longer read
# whole from the cache.
hits=$(($(status_field mce reads hits) - hits_before))
[ $hits -le $((blocks - 32)) ] || { echo "$hits of $blocks blocks read whole from the cache"; pcached status mce; exit 1; }
echo "clean data on failed pages reads back from the backing device; the daemon is up"

# Dirty data: the backing device fails every write (a dm error table), so all of it stays in the
# cache; pages under the new data fail.
dd if=/dev/urandom of=/tmp/dirty bs=64k count=$blocks 2>/dev/null
swap_dm_table backing "0 $sectors error"
dd if=/tmp/dirty of="$dev" bs=64k oflag=direct 2>/dev/null
fail_chunks 58 62 66
kill -0 "$DAEMON_PID"
[ "$(status_field mce badblocks ranges)" = 6 ] || { pcached status mce; exit 1; }
read_all /tmp/dirty
set -- $failed
[ $# -ge 32 ] && [ $# -le 99 ] || { echo "expected the blocks of the failed pages to fail, not:$failed"; exit 1; }
dirty_lost=$failed

# Writeback cannot read that data: it is recorded as lost, and its reads keep failing once the
# backing device (which holds the clean data there) is back.
swap_dm_table backing "0 $sectors linear /dev/vda 0"
pcached flush mce
[ "$(status_field mce lost ranges)" -ge 1 ] || { pcached status mce; exit 1; }
read_all /tmp/dirty
[ "$failed" = "$dirty_lost" ] || { echo "after writeback, failing:$failed (before:$dirty_lost)"; exit 1; }
echo "dirty data on failed pages fails its reads, before and after writeback"

# Rewritten, the lost blocks read back (the new data lands on good pages); the backing disk alone
# then holds it all.
for i in $dirty_lost; do dd if=/tmp/dirty of="$dev" bs=64k skip=$i seek=$i count=1 oflag=direct conv=notrunc 2>/dev/null; done
read_all /tmp/dirty
[ -z "$failed" ] || exit 1
# The record of the loss goes once the new data is on the backing device.
pcached flush mce
[ "$(status_field mce lost ranges)" = 0 ] || { pcached status mce; exit 1; }
pcached remove mce
kill -0 "$DAEMON_PID"
dmsetup remove --noudevsync backing
cmp -n $((blocks * 65536)) /dev/vda /tmp/dirty
echo "memory failures: the daemon lived, nothing served wrong, nothing lost that was not on the failed pages"
