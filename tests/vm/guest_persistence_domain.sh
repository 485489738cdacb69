# Issue 8 in the guest: the NVDIMM booted without a reported persistence domain (Linux: unknown),
# and a memmap= region (legacy e820 pmem: DRAM, unknown too). Writeback is refused on both with a
# message that names the way out; writethrough and writearound work; the override works and shows.
. /guest_lib.sh
trap show_daemon_log EXIT
pcached pmem list | tee /tmp/pmem
grep -q "(ACPI.NFIT).*persistence domain unknown" /tmp/pmem
grep -q "(e820).*persistence domain unknown" /tmp/pmem
nfit=$(sed -n 's/^\(region[0-9]*\) (ACPI.NFIT).*/\1/p' /tmp/pmem)
ndctl disable-region "$nfit" >/dev/null
ndctl init-labels -f all >/dev/null
ndctl enable-region "$nfit" >/dev/null
ndctl create-namespace -r "$nfit" -m devdax -s 256M >/dev/null
dax=$(ls /dev/dax* | head -1)
start_daemon

expect_refusal() {
  if pcached add "$@" 2>/tmp/refusal; then echo "accepted: pcached add $*"; exit 1; fi
  cat /tmp/refusal
  grep -q "persistence domain is unknown" /tmp/refusal
  grep -q -- "--allow-volatile-writeback" /tmp/refusal
  grep -q -- "--mode writethrough or --mode writearound" /tmp/refusal
}

expect_refusal --cache "$dax" --backing /dev/vda --format --name nvdimm
dev=$(pcached add --cache "$dax" --backing /dev/vda --format --name nvdimm --mode writethrough)
fio --name=wt --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite --bs=8k --size=16M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/dev/null
# Data went to the backing device: the kernel must send flushes, and they must reach it.
grep -q "write back" /sys/block/$(basename "$dev")/queue/write_cache
dd if=/dev/urandom of="$dev" bs=4k count=16 oflag=direct conv=fsync 2>/dev/null
pcached --json status nvdimm | grep -q '"backing_flushes": [1-9]'
pcached status nvdimm | tee /tmp/status
grep -q "mode        writethrough" /tmp/status
grep -q "persistence unknown: the backing device stays complete" /tmp/status
if pcached set nvdimm mode writeback 2>/tmp/refusal; then echo "switched to writeback on an unknown domain"; exit 1; fi
grep -q -- "--allow-volatile-writeback" /tmp/refusal
pcached remove nvdimm
echo "nvdimm without a persistence domain: writeback refused, writethrough verified"

dev=$(pcached add --cache "$dax" --backing /dev/vda --format --force --name risky --allow-volatile-writeback)
fio --name=wb --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite --bs=4k --size=16M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/dev/null
pcached status risky | grep -q "WRITEBACK ON MEMORY THAT MAY NOT SURVIVE POWER LOSS"
pcached remove risky
echo "override: accepted and shown"

# The memmap region: ordinary DRAM that the kernel exposes as pmem.
e820=$(sed -n 's/^\(region[0-9]*\) (e820).*/\1/p' /tmp/pmem)
ns=$(ndctl list -r "$e820" -N | sed -n 's/.*"dev":"\(namespace[0-9.]*\)".*/\1/p' | head -1)
ndctl create-namespace -f -e "$ns" -m devdax >/dev/null
memmap_dax=$(ls /dev/dax* | grep -v "^$dax$" | head -1)
test -c "$memmap_dax"
expect_refusal --cache "$memmap_dax" --backing /dev/vda --format --force --name memmap
dev=$(pcached add --cache "$memmap_dax" --backing /dev/vda --format --force --name memmap --mode writearound)
fio --name=wa --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --rw=randrw --bs=4k --size=16M \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 --output-format=terse >/dev/null
pcached status memmap | grep -q "mode        writearound"
pcached remove memmap
echo "memmap region: writeback refused, writearound verified"
