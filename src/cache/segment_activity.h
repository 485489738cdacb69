// What GC needs to choose victims better than oldest-first: how much live data each data segment
// still holds (the index keeps it current as extents are added, trimmed and evicted) and how hot
// its data is: hits counted as they happen and halved every second, so that recent and frequent
// use both count and old use fades. Relaxed atomics, racy increments: the figures steer a choice,
// they never decide correctness (only clean segments are ever reclaimed).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace pcached::cache {

class SegmentActivity {
 public:
  SegmentActivity(uint64_t data_start, uint64_t segment_size, uint32_t count);

  // Sectors of data at `location` (a region offset in a data segment) became live or dead.
  void add_live(uint64_t location, int64_t sectors);
  // The data at `location` was used (a read hit, or new data written there).
  void touch(uint64_t location) {
    std::atomic<uint32_t>& heat = heat_[segment_of(location)];
    const uint32_t now = heat.load(std::memory_order_relaxed);
    if (now != UINT32_MAX) heat.store(now + 1, std::memory_order_relaxed);
  }
  // Halves every segment's heat (once a second, from the writeback worker).
  void decay();

  uint64_t live_sectors(uint32_t segment) const;
  uint32_t heat(uint32_t segment) const { return heat_[segment].load(std::memory_order_relaxed); }
  uint32_t segment_of(uint64_t location) const { return static_cast<uint32_t>((location - data_start_) >> shift_); }

 private:
  uint64_t data_start_;
  unsigned shift_;
  std::vector<std::atomic<int64_t>> live_;
  std::vector<std::atomic<uint32_t>> heat_;
};

}  // namespace pcached::cache
