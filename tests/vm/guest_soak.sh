# Soak (issue 7): mixed random I/O with verification on a 2-queue /dev/ublkb0 for a set time,
# on a cache much smaller than the workload so that writeback and GC run all along, with daemon
# restarts in the middle (SIGTERM, then kill -9, alternating; user recovery each time) while fio
# keeps going. Fails on any verify error, any step that does not finish in time, writeback or GC
# that never ran, or pcachedd's memory passing its bound or growing once warmed up. Prints
# pcachedd's RSS over time.
#
# Parameters come from the kernel command line (unknown name=value parameters reach init's
# environment): pcached_soak_seconds (default 150: the short version of the test suite),
# pcached_soak_restarts (default 2). scripts/soak.sh runs the long campaign.
. /guest_lib.sh
SOAK_SECONDS=${pcached_soak_seconds:-150}
RESTARTS=${pcached_soak_restarts:-2}
# A hung request shows up as a pass that does not end. A pass takes 10-40 s under TCG (minutes on
# a badly loaded host); a restart pauses I/O for a few seconds.
PASS_TIMEOUT=300
now() { cut -d. -f1 /proc/uptime; }
fail() { echo "SOAK FAILED: $*"; touch /tmp/soak.failed; exit 1; }
soak_report() {
  status=$?
  touch /tmp/soak.done
  for log in /tmp/writer.log /tmp/reader.log; do
    # (fio's terse result lines left out: the errors are what matters)
    [ "$status" -ne 0 ] && [ -s "$log" ] && { echo "---- $log"; grep -v '^3;fio' "$log" | tail -30; }
  done
  for log in /tmp/pcachedd.*.log; do  # the daemons stopped by the restarts
    [ "$status" -ne 0 ] && [ -s "$log" ] && { echo "---- $log"; cat "$log"; }
  done
  show_daemon_log
}
trap soak_report EXIT
ip link set lo up  # the metrics endpoint, scraped by sample()

# The cache: a 128 MiB devdax namespace in 4 MiB segments (28 segments, 112 MiB of data), in
# front of the 256 MiB virtio disk; the workload covers the whole disk, twice the cache.
# Writeback is paced at 2 MiB/s, below the writer's pace, so that it runs mostly when GC needs
# room (eager) and dirty data is left for the restarts to recover.
make_devdax 128M
start_daemon
echo "$DAEMON_PID" >/tmp/daemon.pid
echo 1 >/tmp/daemon.gen
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --name soak --queues 2 --segment-size 4M \
  --set writeback_rate=2M)
test "$dev" = /dev/ublkb0
pcached status soak | grep -q "queues      2 x depth"
DEPTH=$(pcached --json status soak | awk -F'[:,]' '/"depth"/ {print $2 + 0; exit}')  # (the frontend object repeats it)
CAPACITY=$(pcached --json status soak | awk -F'[:,]' '/"capacity_bytes"/ {print $2 + 0}')
IDLE_RSS=$(awk '/^VmRSS:/ {print $2}' "/proc/$DAEMON_PID/status")
echo "soak: $SOAK_SECONDS s, $RESTARTS restarts; cache $((CAPACITY >> 20)) MiB, 2 queues x depth $DEPTH;" \
     "pcachedd idle RSS $IDLE_RSS KiB"

# One line per sample: uptime, daemon generation, pid, then in KiB VmRSS, VmHWM, RssAnon, the
# part of RssAnon in the ublk I/O buffers (anonymous mappings of depth x 1 MiB, one per queue;
# the kernel merges them into one when they happen to be adjacent),
# the extent index (from the metrics) and the rest (heap and stacks); then dirty MiB, free
# segments, GC runs, segments reclaimed, MiB written back and writes that waited for a free
# segment. Counters start again with each generation.
metric() {  # name, then a label filter: the first matching value, 0 when absent
  grep "^$1{" "$METRICS" | grep "${2:-}" | head -1 | awk '{v = $2} END {printf "%d", v}'
}
sample() {  # who: its own copy of the metrics (the monitor and the main shell both sample)
  pid=$(cat /tmp/daemon.pid); gen=$(cat /tmp/daemon.gen)
  memory=$(awk '/^VmRSS:/ {rss = $2} /^VmHWM:/ {hwm = $2} /^RssAnon:/ {anon = $2}
                END {if (rss) print rss, hwm, anon}' "/proc/$pid/status" 2>/dev/null) || return 0
  [ -n "$memory" ] || return 0  # between two daemons
  buffers=$(awk -v size=$((DEPTH * 1024)) '/^[0-9a-f]+-[0-9a-f]+ / {anon = NF == 5} /^Size:/ {ours = anon && $2 % size == 0}
                /^Rss:/ {if (ours) kib += $2} END {print kib + 0}' "/proc/$pid/smaps" 2>/dev/null) || return 0
  METRICS=/tmp/metrics.$1
  # (busybox wget's own -T crashes: timeout(1) bounds it instead)
  timeout 10 wget -q -O "$METRICS" http://127.0.0.1:9469/metrics 2>/dev/null || return 0
  grep -q '^pcached_index_bytes{cache="soak"' "$METRICS" || return 0  # not recovered yet
  set -- $memory
  index=$(($(metric pcached_index_bytes) >> 10))
  printf "soak-sample %6d %3d %6d %7d %7d %7d %7d %7d %7d %6d %4d %6d %7d %7d %6d\n" "$(now)" "$gen" "$pid" \
    "$1" "$2" "$3" "$buffers" "$index" $(($3 - buffers - index)) $(($(metric pcached_dirty_bytes) >> 20)) \
    "$(metric pcached_segments 'state="free"')" "$(metric pcached_gc_runs_total)" \
    "$(metric pcached_gc_reclaimed_segments_total)" $(($(metric pcached_writeback_bytes_total) >> 20)) \
    "$(metric pcached_writer_waits_total)" | tee -a /tmp/samples
}
echo "soak-sample uptime gen    pid   VmRSS   VmHWM RssAnon buffers   index   other dirtyM free     gc reclaim  wb_MiB  waits"

# The disk in two regions. Writer: 0-160M, passes of randwrite over the whole region in mixed
# block sizes, each block once per pass (fio's random map), verified while writing
# (verify_backlog) and at the end of the pass; the next pass overwrites it all. Reader: 160-256M,
# written and verified once, then random reads verified against it for the whole soak: once GC
# evicts these blocks they come back from the backing device, so writeback is checked too.
WRITER="--filename=$dev --offset=0 --size=160M --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite
  --bssplit=4k/50:16k/25:64k/20:128k/5 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_backlog=512
  --randrepeat=0"
READER="--offset=160M --size=96M --direct=1 --ioengine=libaio --bs=8k --verify=crc32c --verify_fatal=1"
timeout "$PASS_TIMEOUT" fio --name=reader-fill --filename="$dev" $READER --iodepth=16 --rw=write --do_verify=1 \
  --output-format=terse >/tmp/reader.log 2>&1 || { cat /tmp/reader.log; fail "filling the reader region"; }
echo "soak: reader region written and verified"

START=$(now)
END=$((START + SOAK_SECONDS))
passes() {  # name, then fio arguments: passes until the end of the soak; each must pass in time
  name=$1; shift
  pass=0
  while [ "$(now)" -lt "$END" ]; do
    pass=$((pass + 1))
    began=$(now)
    timeout "$PASS_TIMEOUT" fio --name="$name-$pass" "$@" --output-format=terse >>"/tmp/$name.log" 2>&1 ||
      fail "$name pass $pass failed or did not finish in $PASS_TIMEOUT s (fio exit $?)"
    echo "soak: $name pass $pass verified in $(($(now) - began)) s"
  done
  echo "$pass" >"/tmp/$name.passes"
}
passes writer $WRITER &
WRITER_PID=$!
passes reader --filename="$dev" $READER --iodepth=8 --rw=randread --io_size=32M --randrepeat=0 &
READER_PID=$!
( while [ ! -e /tmp/soak.done ]; do sample monitor; sleep 5; done ) &

wait_exit() {  # pid, seconds: until the process has exited (a zombie counts as exited)
  for i in $(seq $(($2 * 10))); do
    grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null || [ ! -e "/proc/$1" ] && return 0
    sleep 0.1
  done
  return 1
}
restart=0
while [ "$restart" -lt "$RESTARTS" ]; do
  restart=$((restart + 1))
  at=$((START + SOAK_SECONDS * restart / (RESTARTS + 1)))
  while [ "$(now)" -lt "$at" ]; do
    [ ! -e /tmp/soak.failed ] || fail "a fio pass failed"
    sleep 1
  done
  sample main
  if [ $((restart % 2)) -eq 1 ]; then signal=TERM; else signal=KILL; fi
  kill -s "$signal" "$DAEMON_PID"
  wait_exit "$DAEMON_PID" 30 || fail "pcachedd $DAEMON_PID did not exit within 30 s of SIG$signal"
  wait "$DAEMON_PID" || true
  echo "soak: restart $restart: pcachedd $DAEMON_PID stopped by SIG$signal at $(($(now) - START)) s, fio running"
  mv /tmp/pcachedd.log "/tmp/pcachedd.$restart.log"
  began=$(now)
  start_daemon
  for i in $(seq 600); do pcached list 2>/dev/null | grep -q "ublkb0.*running" && break; sleep 0.1; done
  pcached list | grep -q "ublkb0.*running" || fail "cache soak not running after restart $restart"
  echo "$DAEMON_PID" >/tmp/daemon.pid
  echo $((restart + 1)) >/tmp/daemon.gen
  echo "soak: restart $restart: pcachedd $DAEMON_PID recovered /dev/ublkb0 in $(($(now) - began)) s"
  if [ "$signal" = TERM ]; then
    # SIGTERM parks the device (fio's requests wait in the driver) and checkpoints the clean data.
    grep -q "ublkb0: parked for the next pcachedd" "/tmp/pcachedd.$restart.log" || fail "SIGTERM did not park /dev/ublkb0"
    kept=$(status_field soak recovery clean_bytes)
    [ "${kept:-0}" -gt 0 ] || fail "no clean data kept through the SIGTERM restart"
    echo "soak: restart $restart: $((kept >> 20)) MiB of clean data kept cached through it"
  fi
done

# The last passes end on their own; a failed one ends the soak at once.
for pid in "$WRITER_PID" "$READER_PID"; do
  until wait_exit "$pid" 1; do [ ! -e /tmp/soak.failed ] || fail "a fio pass failed"; done
done
wait "$WRITER_PID" || fail "writer"
wait "$READER_PID" || fail "reader"
sample main
touch /tmp/soak.done
echo "soak: $(($(now) - START)) s of I/O, $(cat /tmp/writer.passes) writer passes and $(cat /tmp/reader.passes)" \
     "reader passes verified, $RESTARTS restarts"
pcached status soak

# Writeback and GC ran: the counters of every generation (the last sample of each) added up.
awk '{last[$3] = $0} END {for (g in last) {split(last[g], f); gc += f[13]; rec += f[14]; wb += f[15]}
     printf "soak: totals over all generations: %d GC runs, %d segments reclaimed, %d MiB written back\n", gc, rec, wb
     exit !(gc > 0 && rec > 0 && wb > 0)}' /tmp/samples || fail "GC or writeback did not run"

# Memory bounded. What pcachedd may legitimately hold beyond its idle RSS:
# - the ublk I/O buffers: per queue, depth tags x max_io_bytes (1 MiB), mapped once and touched
#   as tags carry requests. With transparent huge pages (the guest's default, "always") a tag's
#   first request faults in whole 2 MiB pages, so a used tag costs its full 1 MiB whatever the
#   request size: up to 2 queues x depth MiB;
# - the extent index: at most one extent per cached 4 KiB block (fio's smallest request), whose
#   share of a B-tree node is well under 128 bytes;
# - 64 MiB for the rest: allocator arenas of the threads, libraries and buffers set up late.
# A small leak per request fits under that bound in a short run, so each generation is also
# checked for growth of the rest (RssAnon less buffers and index, i.e. the heap): once warmed up
# (its first 30 s: the cache is full, GC and writeback run, the index has its size) it may grow
# by at most 16 MiB. At ~3,500 requests/s under TCG a 100-byte leak per request grows ~20 MiB a
# minute: the short run catches leaks of a few hundred bytes per request, the long one less.
BOUND=$((IDLE_RSS + 2 * DEPTH * 1024 + CAPACITY / 4096 * 128 / 1024 + 64 * 1024))
awk -v bound="$BOUND" '{if ($6 > hwm) hwm = $6} END {
     printf "soak: highest VmHWM %d KiB, bound %d KiB\n", hwm, bound; exit !(hwm <= bound)}' /tmp/samples ||
  fail "pcachedd's memory exceeded the bound"
awk '{gen = $3; if (!(gen in start)) start[gen] = $2; other = $10
      if ($2 - start[gen] <= 30) { if (other > warm[gen]) warm[gen] = other }
      else { if (other > late[gen]) late[gen] = other; seen[gen] = 1 } }
     END {bad = 0
      for (g in warm) { if (!(g in seen)) { printf "soak: generation %d: no sample after warm-up\n", g; bad = 1; continue }
        printf "soak: generation %d: heap (RssAnon less buffers and index) %d KiB warmed up, at most %d KiB after\n",
               g, warm[g], late[g]
        if (late[g] > warm[g] + 16384) bad = 1 }
      exit bad}' /tmp/samples || fail "pcachedd's memory grew after warm-up"

# The reader region once more, on the backing device itself after remove has written everything
# back: what the cache held and what writeback wrote agree with what fio wrote.
timeout "$PASS_TIMEOUT" pcached remove soak
timeout "$PASS_TIMEOUT" fio --name=reader-backing --filename=/dev/vda $READER --iodepth=16 --rw=read \
  --output-format=terse >>/tmp/reader.log 2>&1 || fail "the reader region on the backing device"
echo "soak: reader region verified on the backing device after remove"
echo "soak passed"
