#include "cache/lost_ranges.h"

#include <algorithm>
#include <map>

#include "cache/extent_index.h"

namespace pcached::cache {

namespace {

struct Span {
  uint64_t end;
  uint64_t seq;
};

// Lays [sector, end) numbered seq over `map` (begin -> span), splitting what it overlaps where it is
// older and leaving newer spans in place.
void lay_over(std::map<uint64_t, Span>& map, uint64_t sector, uint64_t end, uint64_t seq) {
  uint64_t cursor = sector;
  while (cursor < end) {
    // The span covering cursor, if any, else the next one starting before end.
    auto it = map.upper_bound(cursor);
    if (it != map.begin() && std::prev(it)->second.end > cursor) {
      it = std::prev(it);
    } else if (it == map.end() || it->first >= end) {
      map.emplace(cursor, Span{end, seq});
      return;
    } else {
      map.emplace(cursor, Span{it->first, seq});
      cursor = it->first;
      continue;
    }
    const uint64_t begin = it->first;
    const Span existing = it->second;
    const uint64_t stop = std::min(existing.end, end);
    if (existing.seq < seq) {
      map.erase(it);
      if (begin < cursor) map.emplace(begin, Span{cursor, existing.seq});
      map.emplace(cursor, Span{stop, seq});
      if (existing.end > stop) map.emplace(stop, Span{existing.end, existing.seq});
    }
    cursor = stop;
  }
}

std::vector<format::LostRange> to_ranges(const std::map<uint64_t, Span>& map) {
  std::vector<format::LostRange> ranges;
  for (const auto& [begin, span] : map) {
    if (!ranges.empty() && ranges.back().sector + ranges.back().sectors == begin && ranges.back().seq == span.seq &&
        span.end - ranges.back().sector <= UINT32_MAX) {
      ranges.back().sectors = static_cast<uint32_t>(span.end - ranges.back().sector);
      continue;
    }
    ranges.push_back({begin, static_cast<uint32_t>(span.end - begin), span.seq});
  }
  return ranges;
}

}  // namespace

std::vector<format::LostRange> add_lost_ranges(std::span<const format::LostRange> ranges,
                                               std::span<const format::LostRange> added) {
  std::map<uint64_t, Span> map;
  for (const format::LostRange& range : ranges) lay_over(map, range.sector, range.sector + range.sectors, range.seq);
  for (const format::LostRange& range : added) lay_over(map, range.sector, range.sector + range.sectors, range.seq);
  std::vector<format::LostRange> result = to_ranges(map);
  coalesce_lost_ranges(result);
  return result;
}

void coalesce_lost_ranges(std::vector<format::LostRange>& ranges, size_t limit) {
  while (ranges.size() > std::max<size_t>(limit, 1)) {
    size_t closest = 0;
    uint64_t smallest_gap = UINT64_MAX;
    for (size_t i = 0; i + 1 < ranges.size(); ++i) {
      const uint64_t end = ranges[i].sector + ranges[i].sectors;
      // A merged range must fit its 32-bit length.
      if (ranges[i + 1].sector + ranges[i + 1].sectors - ranges[i].sector > UINT32_MAX) continue;
      if (ranges[i + 1].sector - end < smallest_gap) {
        smallest_gap = ranges[i + 1].sector - end;
        closest = i;
      }
    }
    if (smallest_gap == UINT64_MAX) return;  // (not with ranges of a real device)
    format::LostRange& first = ranges[closest];
    const format::LostRange& second = ranges[closest + 1];
    first.sectors = static_cast<uint32_t>(second.sector + second.sectors - first.sector);
    first.seq = std::max(first.seq, second.seq);
    ranges.erase(ranges.begin() + static_cast<ptrdiff_t>(closest) + 1);
  }
}

std::vector<format::LostRange> still_lost(const ExtentIndex& index, std::span<const format::LostRange> ranges) {
  std::map<uint64_t, Span> map;
  for (const format::LostRange& range : ranges) {
    index.lookup(range.sector, range.sectors, [&](std::span<const Piece> pieces, uint64_t) {
      for (const Piece& piece : pieces) {
        // A range coalesced from several keeps the newest of their numbers; the pieces it stands
        // for have theirs, or (restored after a restart) its own.
        if (piece.cached && (piece.extent.flags & Extent::kLost) && piece.extent.seq <= range.seq) {
          lay_over(map, piece.sector, piece.sector + piece.sectors, range.seq);
        }
      }
    });
  }
  std::vector<format::LostRange> result = to_ranges(map);
  coalesce_lost_ranges(result);
  return result;
}

}  // namespace pcached::cache
