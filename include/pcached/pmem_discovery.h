// What persistent memory this machine has, as libndctl sees it: regions, their persistence
// domain, and their namespaces with the device a cache would use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pcached/status.h"

namespace pcached::pmem {

struct NamespaceInfo {
  std::string name;    // namespace0.0
  std::string mode;    // fsdax, devdax, sector, raw
  std::string device;  // /dev/dax0.0 or /dev/pmem0 ("" when disabled)
  uint64_t size = 0;
  uint64_t align = 0;
  int numa_node = -1;
};

struct RegionInfo {
  std::string name;  // region0
  std::string bus;
  uint64_t size = 0;
  uint64_t available = 0;
  int numa_node = -1;
  std::string persistence_domain;  // cpu_cache (eADR), memory_controller (ADR), none, unknown
  std::vector<NamespaceInfo> namespaces;
};

// Every NVDIMM/CXL pmem region libndctl finds (none on a machine without pmem).
Result<std::vector<RegionInfo>> discover_pmem();

}  // namespace pcached::pmem
