// Which segment is what: free, holding data, or part of a journal; its generation; and, for data
// segments, the newest dirty key written into it. Allocation hands out free segments; GC gives
// them back. A writer that finds none waits (never fails) until GC frees one. A segment with a
// known media error (bad block) is retired once nothing lives in it: it is never handed out again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace pcached::cache {

enum class SegmentUse : uint8_t { Free, Data, Journal, Bad };

struct SegmentInfo {
  SegmentUse use = SegmentUse::Free;
  uint32_t generation = 0;  // as on the media
  bool sealed = false;      // Data: no more writes go into it
  uint64_t sealed_order = 0;  // Data: when it was sealed (GC reclaims the oldest first)
  uint64_t max_dirty_seq = 0;  // Data: newest key whose data is in it (0: only clean fills)
};

class SegmentTable {
 public:
  explicit SegmentTable(uint32_t count) : segments_(count) {}

  uint32_t count() const { return static_cast<uint32_t>(segments_.size()); }

  // Set-up (recovery), before any concurrent use. Free segments for which is_bad holds are
  // retired instead of listed; is_bad is kept for allocate().
  SegmentInfo& at(uint32_t segment) { return segments_[segment]; }
  void rebuild_free_list(std::function<bool(uint32_t)> is_bad);

  // Takes a free segment for `use`, bumping its generation; waits while there is none unless
  // `wait` is false (then nullopt). Returns the segment; its new generation is in info(segment).
  // A free segment that went bad since it was listed (a memory failure reported while nothing
  // lived in it) is retired on the way, never handed out.
  std::optional<uint32_t> allocate(SegmentUse use, bool wait);
  // No more writes go into the segment; max_dirty_seq is the newest key whose data is in it
  // (its writer tracks that while the segment is open: GC never looks at open segments).
  void seal(uint32_t segment, uint64_t max_dirty_seq);
  // Back to the free list after its data was evicted, or retired (Bad) if it holds a bad block.
  void release(uint32_t segment, bool bad);

  SegmentInfo info(uint32_t segment) const;
  // Sealed data segments whose newest dirty key is below horizon, oldest first.
  std::vector<uint32_t> reclaimable_data(uint64_t horizon, size_t limit) const;

  // The lowest clean horizon at which `count` sealed data segments, not counting those `skip`
  // names, are reclaimable (one past the count-th smallest max_dirty_seq); UINT64_MAX when fewer
  // are sealed. skip is called under the table's lock.
  uint64_t horizon_reclaiming(size_t count, const std::function<bool(uint32_t, const SegmentInfo&)>& skip) const;

  // Data segments that may hold dirty data: open ones, and sealed ones with
  // a key at or above horizon. Cheap enough for every writeback round.
  std::vector<uint32_t> dirty_data_segments(uint64_t horizon) const;

  uint32_t free_count() const { return free_count_.load(std::memory_order_relaxed); }
  uint32_t count_of(SegmentUse use) const;
  // Writers currently waiting for a free segment.
  uint32_t waiters() const { return waiters_.load(std::memory_order_relaxed); }
  uint64_t total_waits() const { return total_waits_.load(std::memory_order_relaxed); }
  // Wakes waiters so they give up (shutdown): allocate() then returns nullopt.
  void shut_down();

 private:
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<SegmentInfo> segments_;
  std::deque<uint32_t> free_;
  std::function<bool(uint32_t)> is_bad_;
  uint64_t seal_counter_ = 0;
  bool shut_down_ = false;
  std::atomic<uint32_t> free_count_{0};  // free_.size(), readable without the lock
  std::atomic<uint32_t> waiters_{0};
  std::atomic<uint64_t> total_waits_{0};
};

}  // namespace pcached::cache
