# Scenario 6: the cache region as a file on an fsdax filesystem (-o dax), and as a plain file
# (page granularity: only with --allow-volatile-region).
. /guest_lib.sh
trap show_daemon_log EXIT
mount_fsdax 512M /pmem
pcached pmem list
dd if=/dev/zero of=/pmem/cache.img bs=1M count=256 2>/dev/null
start_daemon
dev=$(pcached add --cache /pmem/cache.img --backing /dev/vda --format --name fsdax)
fio --name=fsdax --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite --bs=16k --size=64M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/dev/null
pcached status fsdax | grep -q "fsdax: $dev (running)"
# The file's filesystem is on the NVDIMM's namespace, which reports its domain (ADR).
pcached status fsdax | grep -q "persistence memory_controller: dirty data survives power loss"
pcached remove fsdax
echo "fsdax file region: verified"

dd if=/dev/zero of=/tmp/cache.img bs=1M count=64 2>/dev/null
if pcached add --cache /tmp/cache.img --backing /dev/vda --format --name plain 2>/tmp/refusal; then
  echo "a page-granularity file was accepted without --allow-volatile-region"; exit 1
fi
grep -q "not DAX-capable" /tmp/refusal
# A plain file is a volatile/test region: writeback on it needs the explicit override too.
if pcached add --cache /tmp/cache.img --backing /dev/vda --format --name plain --allow-volatile-region 2>/tmp/refusal; then
  echo "writeback on a plain file was accepted without --allow-volatile-writeback"; exit 1
fi
grep -q "persistence domain is volatile/test" /tmp/refusal
dev=$(pcached add --cache /tmp/cache.img --backing /dev/vda --format --name plain --allow-volatile-region \
      --allow-volatile-writeback --segment-size 4M)
fio --name=plain --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite --bs=4k --size=32M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/dev/null
pcached remove plain
echo "plain file region: verified"
