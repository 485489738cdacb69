// Where stores to a region become power-fail safe, and so whether dirty data may live there.
// NVDIMMs and battery-backed CXL memory are durable once stores reach the memory controller (ADR)
// or even the CPU caches (eADR); CXL or memmap DRAM without persistence, and plain files used for
// tests, are not durable at all.
#pragma once

#include <string_view>
#include <vector>

#include "pcached/pmem_discovery.h"
#include "pcached/pmem_region.h"

namespace pcached::pmem {

enum class PersistenceDomain {
  CpuCache,          // eADR: stores are durable once globally visible; no cache flush needed
  MemoryController,  // ADR: stores are durable once flushed from the CPU caches
  None,              // the platform says the memory does not survive power loss
  Unknown,           // the platform does not say
  VolatileTest,      // a plain file (tests, demos): nothing says it survives power loss
};

std::string_view to_string(PersistenceDomain domain);  // cpu_cache, memory_controller, none, unknown, volatile/test
// Whether dirty data in this domain survives a power cut.
bool survives_power_loss(PersistenceDomain domain);
// libndctl's text for a region's persistence_domain attribute.
PersistenceDomain parse_ndctl_domain(std::string_view text);

// The domain of an open region: libpmem2's byte store granularity means eADR; otherwise the
// libndctl region behind it (the devdax device, or the pmem block device holding an fsdax file);
// a file on anything else is volatile/test. `regions` is what discover_pmem() found.
PersistenceDomain persistence_domain_of(const Region& region, const std::vector<RegionInfo>& regions);
// The same, asking libndctl (no pmem on the machine: no regions).
PersistenceDomain persistence_domain_of(const Region& region);

}  // namespace pcached::pmem
