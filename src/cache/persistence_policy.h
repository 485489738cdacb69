// Which cache modes a region's persistence domain allows. Writeback keeps the only copy of dirty
// data on the region, so it needs a domain that survives power loss, or an operator who accepts
// the risk explicitly; writethrough and writearound keep the backing device complete and are
// always allowed.
#pragma once

#include <string>

#include "pcached/persistence_domain.h"
#include "pcached/status.h"
#include "pcached/tunables.h"

namespace pcached::cache {

Status check_mode_for_domain(const std::string& region_path, pmem::PersistenceDomain domain, CacheMode mode,
                             bool allow_volatile_writeback);

}  // namespace pcached::cache
