#include "cache/sector_ranges.h"

#include <algorithm>

namespace pcached::cache {

void SectorRanges::add(uint64_t sector, uint64_t sectors, uint64_t tag) {
  std::lock_guard lock(mutex_);
  ranges_.emplace(sector, Range{sector + sectors, tag});
  longest_ = std::max(longest_, sectors);
  publish_count();
}

bool SectorRanges::overlaps(uint64_t sector, uint64_t sectors) const {
  if (empty()) return false;
  std::lock_guard lock(mutex_);
  const uint64_t end = sector + sectors;
  // Ranges starting before `end` and no earlier than the longest one could reach back.
  const uint64_t from = sector > longest_ ? sector - longest_ : 0;
  for (auto it = ranges_.lower_bound(from); it != ranges_.end() && it->first < end; ++it) {
    if (it->second.end > sector) return true;
  }
  return false;
}

void SectorRanges::remove_below(uint64_t tag, const std::function<void(uint64_t sector, uint64_t sectors)>& removed) {
  if (empty()) return;
  std::lock_guard lock(mutex_);
  std::erase_if(ranges_, [&](const auto& entry) {
    if (entry.second.tag >= tag) return false;
    if (removed) removed(entry.first, entry.second.end - entry.first);
    return true;
  });
  if (ranges_.empty()) longest_ = 0;
  publish_count();
}

void SectorRanges::clear() {
  std::lock_guard lock(mutex_);
  ranges_.clear();
  longest_ = 0;
  publish_count();
}

}  // namespace pcached::cache
