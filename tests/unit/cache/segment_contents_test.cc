#include <catch2/catch.hpp>
#include <vector>

#include "cache/segment_contents.h"

using namespace pcached::cache;

namespace {
constexpr uint64_t kSegmentSize = 1 << 20;
uint64_t at(uint32_t segment, uint64_t sector) { return segment * kSegmentSize + sector * 512; }
}  // namespace

TEST_CASE("a segment's contents are the sectors placed in it, sorted and merged", "[cache][gc]") {
  SegmentContents contents(4);
  contents.note(1, 100, 8, at(1, 0));
  contents.note(1, 108, 8, at(1, 8));  // right after the last, in both: extends it
  contents.note(1, 50, 8, at(1, 16));
  contents.note(1, 56, 10, at(1, 24));  // overlaps the one before
  contents.note(2, 7, 1, at(2, 0));
  contents.note(3, 1000, 8, at(3, 0));
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{50, 16}, {100, 16}});
  CHECK(contents.ranges({3, 1}) == std::vector<SectorRange>{{50, 16}, {100, 16}, {1000, 8}});
  CHECK(contents.ranges({0}).empty());
  // Released, the segment starts over.
  contents.forget(1);
  CHECK(contents.ranges({1, 2}) == std::vector<SectorRange>{{7, 1}});
  contents.note(1, 200, 8, at(1, 0));
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{200, 8}});
}

TEST_CASE("a segment's contents leave out the ranges whose data has all died", "[cache][gc][live]") {
  SegmentContents contents(4);
  LiveSectors live(0, kSegmentSize, 4);
  contents.note(2, 100, 8, at(2, 0));
  contents.note(2, 108, 8, at(2, 40));  // next in sectors, not in place: an entry of its own
  contents.note(2, 300, 16, at(2, 8));
  live.set(at(2, 0), 8);
  live.set(at(2, 40), 8);
  live.set(at(2, 8), 16);
  CHECK(contents.ranges({2}, &live) == std::vector<SectorRange>{{100, 16}, {300, 16}});
  live.clear(at(2, 40), 8);
  live.clear(at(2, 8), 15);  // one sector of it still live: the whole range is looked at
  CHECK(contents.ranges({2}, &live) == std::vector<SectorRange>{{100, 8}, {300, 16}});
  live.clear(at(2, 23), 1);
  CHECK(contents.ranges({2}, &live) == std::vector<SectorRange>{{100, 8}});
  live.clear(at(2, 0), 8);
  CHECK(contents.ranges({2}, &live).empty());
  CHECK(contents.ranges({2}).size() == 2);  // unfiltered: everything it was given
}
