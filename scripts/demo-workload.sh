#!/bin/sh
# The demo itself, for a host with ublk or for the VM's guest: pcachedd, a cache on REGION over
# BACKING, a short fio workload with verification, the cache's status, and teardown.
#   REGION=... BACKING=... [ADD_FLAGS=...] demo-workload.sh
set -e
state=$(mktemp -d /tmp/pcached-demo-state.XXXXXX)
socket="$state/pcached.sock"
pcachedd --state-dir "$state/state" --socket "$socket" --remove-on-exit >"$state/pcachedd.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$state"' EXIT
for i in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
echo "== pcached add --cache $REGION --backing $BACKING --format $ADD_FLAGS"
dev=$(pcached --socket "$socket" add --cache "$REGION" --backing "$BACKING" --format --name demo $ADD_FLAGS)
echo "created $dev"
echo "== fio: 4k random writes then reads, verified (crc32c)"
fio --name=demo --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randrw --bs=4k --size=64M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --group_reporting \
    | grep -E "^ *(read|write|READ|WRITE)[: ]" || true
echo "== pcached list"
pcached --socket "$socket" list
echo "== pcached status demo"
pcached --socket "$socket" status demo
echo "== pcached remove demo (writes every dirty byte back first)"
pcached --socket "$socket" remove demo
echo "demo finished"
