// What reclaiming a data segment costs, by which GC's cost-benefit policy ranks its candidates
// (Writeback::order_by_cost): the copy of the live data it moves, or the hits of the live data it
// evicts.
#pragma once

#include <cstdint>

namespace pcached::cache {

// live_share: the segment's live data over its capacity (0 to 1); heat: its recent use
// (SegmentActivity); moves: whether its live data would move (GcRelocation::worth_moving) rather
// than leave the cache. Lower is cheaper.
//
// (live share + a little) x (1 + heat): an empty segment first, then little live data; of data
// that would be evicted, a cold segment before a hot one. Moved data stays cached, so its heat
// costs nothing: counted, a burst of reads made GC pass over the emptiest segments for fuller cold
// ones. (Random 4 KiB writes over 128 MiB in a 384 MiB region, alternating with rounds of reads of
// it, in process: GC moved about 8 % of the bytes written with heat counted, 6 % without.)
inline double reclaim_cost(double live_share, uint32_t heat, bool moves) {
  const double lost_hits = moves ? 0.0 : static_cast<double>(heat);
  return (live_share + 0.05) * (1.0 + lost_hits);
}

}  // namespace pcached::cache
