#include "cache/persistence_policy.h"

namespace pcached::cache {

Status check_mode_for_domain(const std::string& region_path, pmem::PersistenceDomain domain, CacheMode mode,
                             bool allow_volatile_writeback) {
  if (mode != CacheMode::Writeback || pmem::survives_power_loss(domain) || allow_volatile_writeback) return Status();
  return Status::error(EPERM, "pmem region " + region_path + ": persistence domain is " +
                                  std::string(pmem::to_string(domain)) +
                                  ", so dirty data held there for writeback could be lost at a power cut; "
                                  "use --mode writethrough or --mode writearound, or accept the risk with "
                                  "--allow-volatile-writeback (recorded in the cache's superblock)");
}

}  // namespace pcached::cache
