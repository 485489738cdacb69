// The dirty data writeback lost to media errors, as the control area keeps it (format::LostRange):
// those sectors must keep failing their reads across restarts, until something newer is written
// over them, because the backing device holds an older version of them. The list is short (media
// errors are rare) and bounded; these functions keep it sorted, disjoint and within its bound.
#pragma once

#include <span>
#include <vector>

#include "format/control_area.h"

namespace pcached::cache {

class ExtentIndex;

// `ranges` with `added` laid over them: where they overlap, the range of the newer key wins.
std::vector<format::LostRange> add_lost_ranges(std::span<const format::LostRange> ranges,
                                               std::span<const format::LostRange> added);

// Within the bound: the two ranges closest to each other become one, spanning both and the gap
// between them, numbered with the newer key, until the list fits. That errs towards failing reads
// of sectors that were not lost, never towards serving older data.
void coalesce_lost_ranges(std::vector<format::LostRange>& ranges, size_t limit = format::kMaxLostRanges);

// What is still lost of `ranges` according to the index: the sectors an extent marked lost still
// covers (nothing newer was written over them, nor were they discarded), within the bound.
std::vector<format::LostRange> still_lost(const ExtentIndex& index, std::span<const format::LostRange> ranges);

}  // namespace pcached::cache
