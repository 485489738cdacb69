#include <catch2/catch.hpp>
#include <vector>

#include "cache/segment_contents.h"

using namespace pcached::cache;

TEST_CASE("a segment's contents are the sectors placed in it, sorted and merged", "[cache][gc]") {
  SegmentContents contents(4);
  contents.note(1, 100, 8);
  contents.note(1, 108, 8);  // right after the last: extends it
  contents.note(1, 50, 8);
  contents.note(1, 56, 10);  // overlaps the one before
  contents.note(2, 7, 1);
  contents.note(3, 1000, 8);
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{50, 16}, {100, 16}});
  CHECK(contents.ranges({3, 1}) == std::vector<SectorRange>{{50, 16}, {100, 16}, {1000, 8}});
  CHECK(contents.ranges({0}).empty());
  // Released, the segment starts over.
  contents.forget(1);
  CHECK(contents.ranges({1, 2}) == std::vector<SectorRange>{{7, 1}});
  contents.note(1, 200, 8);
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{200, 8}});
}
