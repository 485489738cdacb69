# The guest has what the end-to-end tests need: ublk, an NVDIMM region libndctl sees, a virtio disk.
test -c /dev/ublk-control
test -b /dev/vda
test -b /dev/pmem0
ndctl list -R | grep -q '"dev":"region0"'
echo "guest kernel $(uname -r): ublk-control, pmem0 and vda present"
