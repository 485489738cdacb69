# The kernels before 6.4 (Debian 12's own 6.1 among them) know only the legacy ublk opcodes and have
# no GET_FEATURES. PCACHED_UBLK_LEGACY_OPCODES=1 makes pcachedd take that path here, on a 6.12
# kernel that takes both: scenario 3 (kill -9 during verified writes, user recovery, e2fsck) on it.
. /guest_lib.sh
trap show_daemon_log EXIT
export PCACHED_UBLK_LEGACY_OPCODES=1
# (The daemon may open the control device after its socket, restoring the caches it had.)
expect_log() {
  for i in $(seq 100); do
    grep -q "ublk: driver features 0x0, legacy opcodes" /tmp/pcachedd.log && return 0
    sleep 0.1
  done
  echo "pcachedd did not take the legacy opcodes"
  exit 1
}
kill_recovery_scenario
echo "kill -9 recovery passed on the legacy ublk opcodes"
