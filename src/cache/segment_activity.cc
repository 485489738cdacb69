#include "cache/segment_activity.h"

#include <algorithm>
#include <bit>

namespace pcached::cache {

SegmentActivity::SegmentActivity(uint64_t data_start, uint64_t segment_size, uint32_t count)
    : data_start_(data_start),
      shift_(static_cast<unsigned>(std::countr_zero(segment_size))),
      live_(count),
      heat_(count) {}

void SegmentActivity::decay() {
  for (std::atomic<uint32_t>& heat : heat_) heat.store(heat.load(std::memory_order_relaxed) / 2, std::memory_order_relaxed);
}

void SegmentActivity::add_live(uint64_t location, int64_t sectors) {
  live_[segment_of(location)].fetch_add(sectors, std::memory_order_relaxed);
}

uint64_t SegmentActivity::live_sectors(uint32_t segment) const {
  return static_cast<uint64_t>(std::max<int64_t>(0, live_[segment].load(std::memory_order_relaxed)));
}

}  // namespace pcached::cache
