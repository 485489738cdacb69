# Metrics: pcachedd's /metrics (loopback) passes promtool and its values move with I/O.
. /guest_lib.sh
trap show_daemon_log EXIT
ip link set lo up
make_devdax 256M
start_daemon
dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --name m)
scrape() { wget -qO- http://127.0.0.1:9469/metrics; }
scrape > /tmp/before
promtool check metrics < /tmp/before
value() { grep "^$1{" "$2" | grep "cache=\"m\"" | grep "$3" | head -1 | awk '{print $2}'; }
writes_before=$(value pcached_write_requests_total /tmp/before "")
fio --name=m --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --size=8M --number_ios=500 \
    --iodepth=8 --output-format=terse >/dev/null
dd if="$dev" of=/dev/null bs=4k count=100 iflag=direct 2>/dev/null || dd if="$dev" of=/dev/null bs=4k count=100
scrape > /tmp/after
promtool check metrics < /tmp/after
writes_after=$(value pcached_write_requests_total /tmp/after "")
echo "pcached_write_requests_total: $writes_before -> $writes_after"
test "$writes_after" -ge $((writes_before + 500))
grep -q 'pcached_build_info{version=' /tmp/after
# Every write was timed and its copy counted.
timed=$(grep "^pcached_request_duration_seconds_count{cache=\"m\"" /tmp/after | grep 'op="write"' | awk '{print $2}')
test "$timed" -ge 500
copies=$(grep "^pcached_pmem_copies_total{cache=\"m\"" /tmp/after | awk '{s += $2} END {print s}')
test "$copies" -ge 500
grep -q "pcached_segments{cache=\"m\",device=\"$dev\",state=\"free\"}" /tmp/after
pcached remove m
echo "metrics scraped and checked"
