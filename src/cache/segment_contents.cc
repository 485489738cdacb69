#include "cache/segment_contents.h"

#include <algorithm>

#include "format/layout.h"

namespace pcached::cache {

void SegmentContents::note(uint32_t index, uint64_t sector, uint64_t sectors, uint64_t location) {
  Segment& segment = segments_[index];
  std::lock_guard lock(segment.mutex);
  if (!segment.placed.empty()) {
    Placed& last = segment.placed.back();
    if (last.range.end() == sector && last.location + last.range.sectors * format::kSectorSize == location) {
      last.range.sectors += sectors;
      return;
    }
  }
  segment.placed.push_back({{sector, sectors}, location});
}

std::vector<SectorRange> SegmentContents::ranges(const std::vector<uint32_t>& segments, const LiveSectors* live) const {
  std::vector<SectorRange> all;
  for (uint32_t index : segments) {
    const Segment& segment = segments_[index];
    std::lock_guard lock(segment.mutex);
    for (const Placed& placed : segment.placed) {
      if (live == nullptr || live->any(placed.location, placed.range.sectors)) all.push_back(placed.range);
    }
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
  segments_[segment].placed.clear();
  segments_[segment].placed.shrink_to_fit();
}

}  // namespace pcached::cache
