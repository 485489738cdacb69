// Which logical sectors each data segment has received data for, so that GC looks up only the
// index entries that can point into the segments it reclaims, instead of walking the whole index
// (with every shard locked in turn) once per run: a run then costs what its victims hold, not what
// the cache holds.
//
// A segment's list only grows while the segment is in use: an overwrite or a move leaves its old
// range behind, and the lookup skips whatever is no longer located in the segment. So the list may
// name more than is live, never less, as long as every placement of data in a segment is noted
// (under the index shard's lock, as the extent is placed) and a list is forgotten only when its
// segment holds no live data (GC's release). A range written right after the previous one extends
// it, so sequential data costs one entry per segment.
//
// Each range keeps where its data went: under a steady overwrite load most of a victim's ranges
// hold nothing live any more, and the live sectors' bits (live_sectors.h) drop those before GC
// sorts the rest and looks them up in the index.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cache/live_sectors.h"

namespace pcached::cache {

struct SectorRange {
  uint64_t sector = 0;
  uint64_t sectors = 0;
  uint64_t end() const { return sector + sectors; }
  bool operator==(const SectorRange&) const = default;
};

class SegmentContents {
 public:
  explicit SegmentContents(uint32_t count) : segments_(std::make_unique<Segment[]>(count)) {}

  // The data of [sector, sector+sectors) was placed in `segment`, at region offset `location`.
  void note(uint32_t segment, uint64_t sector, uint64_t sectors, uint64_t location);
  // What the segments were given, sorted and merged: a superset of the sectors whose data is there.
  // With `live`, without the ranges whose data has all died since.
  std::vector<SectorRange> ranges(const std::vector<uint32_t>& segments, const LiveSectors* live = nullptr) const;
  // The segment holds no live data any more (it is being released).
  void forget(uint32_t segment);

 private:
  struct Placed {
    SectorRange range;
    uint64_t location;
  };
  struct Segment {
    mutable std::mutex mutex;
    std::vector<Placed> placed;  // in the order noted
  };

  std::unique_ptr<Segment[]> segments_;
};

}  // namespace pcached::cache
