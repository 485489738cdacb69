// A thread-safe set of sector ranges, each tagged with a number, that answers "does anything here
// touch these sectors?". Ranges may overlap. Used for data writeback has collected but not yet
// written, and for discards journaled but not yet passed down to the backing device: a write that
// would go straight to the device must not land under either.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace pcached::cache {

class SectorRanges {
 public:
  void add(uint64_t sector, uint64_t sectors, uint64_t tag = 0);
  // Whether a range touches [sector, sector+sectors).
  bool overlaps(uint64_t sector, uint64_t sectors) const;
  // Drops the ranges whose tag is below `tag`, telling `removed` (if given) about each.
  void remove_below(uint64_t tag, const std::function<void(uint64_t sector, uint64_t sectors)>& removed = {});
  void clear();
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

 private:
  struct Range {
    uint64_t end;
    uint64_t tag;
  };
  void publish_count() { count_.store(ranges_.size(), std::memory_order_release); }

  mutable std::mutex mutex_;
  std::multimap<uint64_t, Range> ranges_;  // by first sector
  uint64_t longest_ = 0;                   // sectors: bounds the search for an overlap
  std::atomic<size_t> count_{0};           // ranges_.size(), readable without the lock
};

}  // namespace pcached::cache
