# Scenario 3: kill -9 of pcachedd while fio writes with verification through ext4; a new
# pcachedd recovers the same /dev/ublkb0 (user recovery); fio's verify passes; e2fsck is clean.
. /guest_lib.sh
trap show_daemon_log EXIT
kill_recovery_scenario
echo "kill -9 recovery passed"
