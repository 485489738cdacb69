#include <daxctl/libdaxctl.h>
#include <ndctl/libndctl.h>
#include <linux/ndctl.h>

#include <memory>

#include "pcached/pmem_discovery.h"

namespace pcached::pmem {

namespace {

const char* domain_name(ndctl_persistence_domain domain) {
  switch (domain) {
    case PERSISTENCE_CPU_CACHE:
      return "cpu_cache";
    case PERSISTENCE_MEM_CTRL:
      return "memory_controller";
    case PERSISTENCE_NONE:
      return "none";
    default:
      return "unknown";
  }
}

const char* mode_name(ndctl_namespace_mode mode) {
  switch (mode) {
    case NDCTL_NS_MODE_FSDAX:
      return "fsdax";
    case NDCTL_NS_MODE_DEVDAX:
      return "devdax";
    case NDCTL_NS_MODE_SECTOR:
      return "sector";
    case NDCTL_NS_MODE_RAW:
      return "raw";
    default:
      return "unknown";
  }
}

NamespaceInfo describe(ndctl_namespace* ns) {
  NamespaceInfo info;
  info.name = ndctl_namespace_get_devname(ns);
  info.mode = mode_name(ndctl_namespace_get_mode(ns));
  info.size = ndctl_namespace_get_size(ns);
  info.numa_node = ndctl_namespace_get_numa_node(ns);
  if (ndctl_dax* dax = ndctl_namespace_get_dax(ns)) {
    info.align = ndctl_dax_get_align(dax);
    if (daxctl_region* region = ndctl_dax_get_daxctl_region(dax)) {
      daxctl_dev* dev = nullptr;
      daxctl_dev_foreach(region, dev) {
        if (daxctl_dev_get_size(dev) > 0) {
          info.device = std::string("/dev/") + daxctl_dev_get_devname(dev);
          break;
        }
      }
    }
  } else if (ndctl_pfn* pfn = ndctl_namespace_get_pfn(ns)) {
    // fsdax with a page map: the block device hangs off the pfn device, not the namespace.
    info.align = ndctl_pfn_get_align(pfn);
    if (const char* block = ndctl_pfn_get_block_device(pfn); block != nullptr && *block != '\0') {
      info.device = std::string("/dev/") + block;
    }
  } else if (const char* block = ndctl_namespace_get_block_device(ns); block != nullptr && *block != '\0') {
    info.device = std::string("/dev/") + block;
  }
  return info;
}

}  // namespace

Result<std::vector<RegionInfo>> discover_pmem() {
  ndctl_ctx* raw = nullptr;
  if (int rc = ndctl_new(&raw); rc != 0) return Status::error(-rc, "libndctl: cannot initialise");
  std::unique_ptr<ndctl_ctx, decltype(&ndctl_unref)> ctx(raw, ndctl_unref);
  std::vector<RegionInfo> regions;
  ndctl_bus* bus = nullptr;
  ndctl_bus_foreach(ctx.get(), bus) {
    ndctl_region* region = nullptr;
    ndctl_region_foreach(bus, region) {
      if (ndctl_region_get_type(region) != ND_DEVICE_REGION_PMEM) continue;
      RegionInfo info;
      info.name = ndctl_region_get_devname(region);
      info.bus = ndctl_bus_get_provider(bus);
      info.size = ndctl_region_get_size(region);
      info.available = ndctl_region_get_available_size(region);
      info.numa_node = ndctl_region_get_numa_node(region);
      info.persistence_domain = domain_name(ndctl_region_get_persistence_domain(region));
      ndctl_namespace* ns = nullptr;
      ndctl_namespace_foreach(region, ns) {
        if (ndctl_namespace_get_size(ns) == 0) continue;  // the seed namespace
        info.namespaces.push_back(describe(ns));
      }
      regions.push_back(std::move(info));
    }
  }
  return regions;
}

}  // namespace pcached::pmem
