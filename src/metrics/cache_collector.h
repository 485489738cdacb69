// Prometheus metrics of the caches, built at scrape time from each cache's statistics (which queue
// threads keep per queue, without shared atomics on the I/O path). Names follow Prometheus
// conventions in the style of node_exporter's bcache collector: pcached_*, base units,
// _total for counters, labels cache and device.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <string>
#include <vector>

#include "pcached/cache.h"

namespace pcached::metrics {

struct CacheSample {
  std::string name;
  std::string device;  // /dev/ublkbN, empty while the device is down
  cache::CacheStats stats;
};

// Every metric family for these caches (and pcached_build_info).
std::vector<prometheus::MetricFamily> cache_families(const std::vector<CacheSample>& caches);
// The text exposition format of the families.
std::string exposition(const std::vector<prometheus::MetricFamily>& families);

class CacheCollector final : public prometheus::Collectable {
 public:
  using Source = std::function<std::vector<CacheSample>()>;
  explicit CacheCollector(Source source) : source_(std::move(source)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return cache_families(source_()); }

 private:
  Source source_;
};

}  // namespace pcached::metrics
