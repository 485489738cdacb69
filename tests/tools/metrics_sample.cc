// Prints the metrics exposition of two sample caches, for `promtool check metrics`.
#include <cstdio>

#include "metrics/cache_collector.h"

int main() {
  using namespace pcached::metrics;
  CacheSample a{"db", "/dev/ublkb0", {}};
  a.stats.read_hits = 10;
  a.stats.writes = 3;
  a.stats.dirty_bytes = 4096;
  CacheSample b{"logs", "/dev/ublkb1", {}};
  b.stats.read_misses = 1;
  std::fputs(exposition(cache_families({a, b})).c_str(), stdout);
  return 0;
}
