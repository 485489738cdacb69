# The README demo inside the VM: the emulated NVDIMM (a file on the host) as a devdax cache,
# the virtio disk (a file on the host) as backing.
. /guest_lib.sh
make_devdax 512M
REGION=/dev/dax0.0 BACKING=/dev/vda ADD_FLAGS="--queues 2" sh /usr/local/bin/demo-workload.sh
