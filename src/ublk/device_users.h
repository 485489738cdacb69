// Who else uses a block device. Stopping a ublk device pulls the disk out from under whoever has
// it: a filesystem mounted on it loses its page cache, a program with it open gets EIO, and
// DEL_DEV waits until the last of them lets go. So a device is removed only when unused.
#pragma once

#include <string>

#include "pcached/status.h"

namespace pcached::ublk {

// EBUSY naming a user of the block device node: a mount or a stacked device (which claim it
// exclusively), or a process that has it open (as far as /proc lets this process see). OK when
// only this process uses it, or when the node is gone.
Status ensure_unused(const std::string& block_device);

}  // namespace pcached::ublk
