#include "cache/segment_table.h"

#include <algorithm>

namespace pcached::cache {

void SegmentTable::rebuild_free_list(std::function<bool(uint32_t)> is_bad) {
  std::lock_guard lock(mutex_);
  is_bad_ = std::move(is_bad);
  free_.clear();
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    if (segments_[i].use == SegmentUse::Bad || (segments_[i].use == SegmentUse::Free && is_bad_(i))) {
      segments_[i].use = SegmentUse::Bad;
    } else if (segments_[i].use == SegmentUse::Free) {
      free_.push_back(i);
    }
  }
  free_count_ = static_cast<uint32_t>(free_.size());
}

std::optional<uint32_t> SegmentTable::allocate(SegmentUse use, bool wait) {
  std::unique_lock lock(mutex_);
  uint32_t segment = 0;
  for (;;) {
    if (free_.empty() && wait && !shut_down_) {
      waiters_.fetch_add(1, std::memory_order_relaxed);
      total_waits_.fetch_add(1, std::memory_order_relaxed);
      freed_.wait(lock, [&] { return !free_.empty() || shut_down_; });
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (free_.empty()) return std::nullopt;
    segment = free_.front();
    free_.pop_front();
    free_count_ = static_cast<uint32_t>(free_.size());
    if (!is_bad_ || !is_bad_(segment)) break;
    segments_[segment].use = SegmentUse::Bad;
  }
  SegmentInfo& info = segments_[segment];
  info.use = use;
  ++info.generation;
  info.sealed = false;
  info.max_dirty_seq = 0;
  return segment;
}

void SegmentTable::seal(uint32_t segment, uint64_t max_dirty_seq) {
  std::lock_guard lock(mutex_);
  segments_[segment].sealed = true;
  segments_[segment].sealed_order = ++seal_counter_;
  segments_[segment].max_dirty_seq = std::max(segments_[segment].max_dirty_seq, max_dirty_seq);
}

void SegmentTable::release(uint32_t segment, bool bad) {
  {
    std::lock_guard lock(mutex_);
    segments_[segment].use = bad ? SegmentUse::Bad : SegmentUse::Free;
    segments_[segment].sealed = false;
    segments_[segment].max_dirty_seq = 0;
    if (bad) return;
    free_.push_back(segment);
    free_count_ = static_cast<uint32_t>(free_.size());
  }
  freed_.notify_all();
}

SegmentInfo SegmentTable::info(uint32_t segment) const {
  std::lock_guard lock(mutex_);
  return segments_[segment];
}

std::vector<uint32_t> SegmentTable::reclaimable_data(uint64_t horizon, size_t limit) const {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> candidates;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const SegmentInfo& info = segments_[i];
    if (info.use == SegmentUse::Data && info.sealed && info.max_dirty_seq < horizon) candidates.push_back(i);
  }
  std::sort(candidates.begin(), candidates.end(),
            [&](uint32_t a, uint32_t b) { return segments_[a].sealed_order < segments_[b].sealed_order; });
  if (candidates.size() > limit) candidates.resize(limit);
  return candidates;
}

uint64_t SegmentTable::horizon_reclaiming(size_t count,
                                          const std::function<bool(uint32_t, const SegmentInfo&)>& skip) const {
  if (count == 0) return 0;
  std::vector<uint64_t> newest;
  {
    std::lock_guard lock(mutex_);
    for (uint32_t i = 0; i < segments_.size(); ++i) {
      const SegmentInfo& info = segments_[i];
      if (info.use == SegmentUse::Data && info.sealed && !skip(i, info)) newest.push_back(info.max_dirty_seq);
    }
  }
  if (newest.size() < count) return UINT64_MAX;
  const auto nth = newest.begin() + static_cast<std::ptrdiff_t>(count - 1);
  std::nth_element(newest.begin(), nth, newest.end());
  return *nth + 1;
}

std::vector<uint32_t> SegmentTable::dirty_data_segments(uint64_t horizon) const {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> dirty;
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const SegmentInfo& info = segments_[i];
    if (info.use == SegmentUse::Data && (!info.sealed || info.max_dirty_seq >= horizon)) {
      dirty.push_back(i);
    }
  }
  return dirty;
}

uint32_t SegmentTable::count_of(SegmentUse use) const {
  std::lock_guard lock(mutex_);
  return static_cast<uint32_t>(std::count_if(segments_.begin(), segments_.end(),
                                             [use](const SegmentInfo& info) { return info.use == use; }));
}

void SegmentTable::shut_down() {
  {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
  }
  freed_.notify_all();
}

}  // namespace pcached::cache
