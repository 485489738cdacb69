#include "cache/segment_contents.h"

#include <algorithm>

namespace pcached::cache {

void SegmentContents::note(uint32_t index, uint64_t sector, uint64_t sectors) {
  Segment& segment = segments_[index];
  std::lock_guard lock(segment.mutex);
  if (!segment.ranges.empty() && segment.ranges.back().end() == sector) {
    segment.ranges.back().sectors += sectors;
    return;
  }
  segment.ranges.push_back({sector, sectors});
}

std::vector<SectorRange> SegmentContents::ranges(const std::vector<uint32_t>& segments) const {
  std::vector<SectorRange> all;
  for (uint32_t index : segments) {
    const Segment& segment = segments_[index];
    std::lock_guard lock(segment.mutex);
    all.insert(all.end(), segment.ranges.begin(), segment.ranges.end());
  }
  std::sort(all.begin(), all.end(), [](const SectorRange& a, const SectorRange& b) { return a.sector < b.sector; });
  std::vector<SectorRange> merged;
  for (const SectorRange& range : all) {
    if (!merged.empty() && range.sector <= merged.back().end()) {
      merged.back().sectors = std::max(merged.back().end(), range.end()) - merged.back().sector;
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

void SegmentContents::forget(uint32_t segment) {
  std::lock_guard lock(segments_[segment].mutex);
  segments_[segment].ranges.clear();
  segments_[segment].ranges.shrink_to_fit();
}

}  // namespace pcached::cache
