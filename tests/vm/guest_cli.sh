# pcached CLI flows on a real /dev/ublkbN: pmem list against the emulated NVDIMM, add, list,
# status, set, flush, remove, and the exit codes of usage errors, failures and an absent daemon.
. /guest_lib.sh
trap show_daemon_log EXIT
expect_exit() {  # status, then the command
  want=$1; shift
  set +e; "$@" >/tmp/out 2>&1; got=$?; set -e
  [ "$got" -eq "$want" ] || { echo "expected exit $want, got $got: $*"; cat /tmp/out; exit 1; }
}
expect_exit 3 pcached list
make_devdax 256M
pcached pmem list | tee /tmp/pmem
grep -q "^region0 (.*persistence domain" /tmp/pmem
grep -q "devdax  /dev/dax0.0" /tmp/pmem
start_daemon
# A backing device that is mounted is refused (O_EXCL), and nothing is written to it.
/sbin/mke2fs -q -t ext4 -F /dev/vda
mkdir -p /mnt/busy && mount /dev/vda /mnt/busy
echo precious > /mnt/busy/file
expect_exit 1 pcached add --cache /dev/dax0.0 --backing /dev/vda --format --name busy
grep -q "/dev/vda.*is in use (mounted" /tmp/out
umount /mnt/busy
mount /dev/vda /mnt/busy && grep -q precious /mnt/busy/file && umount /mnt/busy
expect_exit 2 pcached add --cache /dev/dax0.0
expect_exit 2 pcached add --cache /dev/dax0.0 --backing /dev/vda --depth 0
expect_exit 2 pcached add --cache /dev/dax0.0 --backing /dev/vda --copy-policy warp
expect_exit 1 pcached add --cache /dev/dax0.0 --backing /dev/vda
grep -q "is blank" /tmp/out
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --name web --queues 1 --depth 64)
test "$dev" = /dev/ublkb0
pcached pmem list | grep -q "used by pcached cache web"
pcached --json list | grep -q '"device": "/dev/ublkb0"'
expect_exit 1 pcached add --cache /dev/dax0.0 --backing /dev/vda --format --name again
grep -q "already uses" /tmp/out
dd if=/dev/urandom of="$dev" bs=64k count=64 oflag=direct 2>/dev/null || dd if=/dev/urandom of="$dev" bs=64k count=64 conv=fsync 2>/dev/null
pcached status web | grep -q "queues      1 x depth 64"
pcached status web | grep -q "memory      index .* extents), live-sector map "
pcached status web | grep -q "persistence memory_controller: dirty data survives power loss"
# Modes and policies at run time; leaving writeback writes the dirty data back first.
pcached set web mode writethrough
pcached --json status web | grep -q '"dirty_bytes": 0'
pcached set web sequential_cutoff 1M
pcached --json status web | grep -q '"sequential_cutoff": "1M"'
dd if=/dev/urandom of="$dev" bs=128k count=32 oflag=direct 2>/dev/null
pcached --json status web | grep -q '"mode": "writethrough"'
expect_exit 1 pcached set web writeback_low 99
grep -q "must not exceed writeback_high" /tmp/out
pcached set web mode writeback
pcached set web gc_threshold 50
pcached --json status web | grep -q '"threshold_percent": 50'
expect_exit 1 pcached set web gc_threshold 95
grep -q "not a percentage from 0 to 90" /tmp/out
expect_exit 2 pcached set web colour blue
pcached set web copy_policy nt
pcached status web | grep -q "copy policy fixed nt"
pcached flush web | grep -q "0 B dirty"
expect_exit 1 pcached status nosuch
expect_exit 1 pcached remove nosuch
pcached remove /dev/ublkb0
test ! -e /dev/ublkb0
pcached --json list | grep -q '"caches": \[\]'
# Queue affinity: with --queue-affinity kernel each queue's thread is bound to the CPUs the kernel
# maps to its queue (with two queues on the guest's two CPUs, one each); by default (auto) there
# only where those are more than one CPU, and otherwise to the other CPUs: here each queue's
# thread runs on the CPU that does not submit to it. With --queue-affinity none, anywhere.
queue_cpus() {  # "pcached-qN <Cpus_allowed_list>" per queue thread of the daemon
  for task in /proc/$DAEMON_PID/task/*; do
    case $(cat $task/comm) in
      pcached-q*) echo "$(cat $task/comm) $(awk '/^Cpus_allowed_list/ {print $2}' $task/status)" ;;
    esac
  done | sort
}
# check_affinity NAME SETTING THREAD_CPUS STATUS_CPUS ADD_ARGS...: a cache added with ADD_ARGS runs
# its queue threads on THREAD_CPUS, and status says SETTING and STATUS_CPUS (a JSON pattern).
check_affinity() {
  name=$1 setting=$2 threads=$3 listed=$4
  shift 4
  pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force --name $name "$@" >/dev/null
  queue_cpus | tee /tmp/cpus
  [ "$(cat /tmp/cpus)" = "$threads" ]
  pcached status $name | grep -q "affinity $setting"
  pcached --json status $name | tr -d ' \n' | grep -q "\"queue_cpus\":$listed"
  pcached remove $name
}
pinned=$(printf 'pcached-q0 0\npcached-q1 1')
crossed=$(printf 'pcached-q0 1\npcached-q1 0')
unbound=$(printf 'pcached-q0 0-1\npcached-q1 0-1')
check_affinity pinned kernel "$pinned" '\[\[0\],\[1\]\]' --queues 2 --queue-affinity kernel
check_affinity crossed auto "$crossed" '\[\[1\],\[0\]\]' --queues 2
grep -q "queue 1 is mapped to CPU 1 alone; its thread runs on CPUs 0 (queue affinity auto)" /tmp/pcachedd.log
check_affinity free none "$unbound" '\[\[\],\[\]\]' --queues 2 --queue-affinity none
# One queue: the kernel maps both CPUs to it, and auto binds it there.
check_affinity one auto "pcached-q0 0-1" '\[\[0,1\]\]' --queues 1

# Spinning before sleeping: after each request the queue's thread spins --queue-poll-us for the
# next one, which shows as its CPU time; with 0 it sleeps at once.
queue_ticks() {  # user + system clock ticks of the daemon's queue threads
  total=0
  for task in /proc/$DAEMON_PID/task/*; do
    case $(cat $task/comm) in
      pcached-q*) set -- $(cat $task/stat); total=$((total + ${14} + ${15})) ;;
    esac
  done
  echo $total
}
spin_ticks() {  # NAME POLL_US: ticks the queue thread spends over 20 reads 50 ms apart
  dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force --name $1 --queues 1 --queue-poll-us $2)
  pcached status $1 | grep -q "spin $2 us before sleeping"
  before=$(queue_ticks)
  for i in $(seq 20); do dd if=$dev of=/dev/null bs=4k count=1 skip=$i iflag=direct 2>/dev/null; sleep 0.05; done
  after=$(queue_ticks)
  pcached remove $1 >/dev/null
  echo $((after - before))
}
spinning=$(spin_ticks spin 10000)
sleeping=$(spin_ticks nospin 0)
echo "queue thread CPU over 20 reads: $spinning ticks spinning 10 ms, $sleeping ticks not spinning"
# 20 spins of 10 ms are 20 ticks more (a read itself costs a few ticks under TCG).
[ $((spinning - sleeping)) -ge 10 ]
pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force --name defaults >/dev/null
pcached status defaults | grep -q "spin 50 us before sleeping"
pcached remove defaults >/dev/null
echo "CLI flows passed"
