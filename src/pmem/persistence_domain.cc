#include "pcached/persistence_domain.h"

#include <spdlog/spdlog.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <string>

namespace pcached::pmem {

namespace {

// The block device holding a file: /sys/dev/block/M:m names it; a partition's parent is the
// namespace's device.
std::string block_device_of(dev_t device) {
  std::error_code error;
  const std::filesystem::path sys =
      "/sys/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device));
  std::filesystem::path resolved = std::filesystem::canonical(sys, error);
  if (error) return {};
  if (std::filesystem::exists(resolved / "partition", error)) resolved = resolved.parent_path();
  return "/dev/" + resolved.filename().string();
}

}  // namespace

std::string_view to_string(PersistenceDomain domain) {
  switch (domain) {
    case PersistenceDomain::CpuCache:
      return "cpu_cache";
    case PersistenceDomain::MemoryController:
      return "memory_controller";
    case PersistenceDomain::None:
      return "none";
    case PersistenceDomain::Unknown:
      return "unknown";
    case PersistenceDomain::VolatileTest:
      return "volatile/test";
  }
  return "unknown";
}

bool survives_power_loss(PersistenceDomain domain) {
  return domain == PersistenceDomain::CpuCache || domain == PersistenceDomain::MemoryController;
}

PersistenceDomain parse_ndctl_domain(std::string_view text) {
  if (text == "cpu_cache") return PersistenceDomain::CpuCache;
  if (text == "memory_controller") return PersistenceDomain::MemoryController;
  if (text == "none") return PersistenceDomain::None;
  return PersistenceDomain::Unknown;
}

PersistenceDomain persistence_domain_of(const Region& region, const std::vector<RegionInfo>& regions) {
  if (region.granularity() == Granularity::Byte) return PersistenceDomain::CpuCache;
  if (region.granularity() == Granularity::Page) return PersistenceDomain::VolatileTest;
  const RegionIdentity& identity = region.identity();
  const std::string device =
      identity.kind == RegionKind::DevDax ? std::filesystem::weakly_canonical(identity.path).string()
                                          : block_device_of(identity.device);
  for (const RegionInfo& info : regions) {
    for (const NamespaceInfo& ns : info.namespaces) {
      if (!ns.device.empty() && ns.device == device) return parse_ndctl_domain(info.persistence_domain);
    }
  }
  // A devdax device libndctl does not know (e.g. CXL RAM or hmem exposed as dax): the platform
  // says nothing. A file that is not on a pmem namespace is a test region.
  return identity.kind == RegionKind::DevDax ? PersistenceDomain::Unknown : PersistenceDomain::VolatileTest;
}

PersistenceDomain persistence_domain_of(const Region& region) {
  auto regions = discover_pmem();
  if (!regions.ok()) {
    spdlog::debug("pmem region {}: libndctl: {}", region.path(), regions.status().message());
    return persistence_domain_of(region, {});
  }
  return persistence_domain_of(region, regions.value());
}

}  // namespace pcached::pmem
