#include <catch2/catch.hpp>
#include <vector>

#include "cache/segment_contents.h"

using namespace pcached::cache;

namespace {
constexpr uint64_t kDataStart = 10 << 20;
constexpr uint64_t kSegment = 1 << 20;
uint64_t at(uint32_t segment, uint64_t offset = 4096) { return kDataStart + segment * kSegment + offset; }
}  // namespace

TEST_CASE("a segment's contents are the sectors placed in it, sorted and merged", "[cache][gc]") {
  SegmentContents contents(kDataStart, kSegment, 4);
  contents.note(at(1), 100, 8);
  contents.note(at(1, 8192), 108, 8);  // right after the last: extends it
  contents.note(at(1, 12288), 50, 8);
  contents.note(at(1, 16384), 56, 10);  // overlaps the one before
  contents.note(at(2), 7, 1);
  contents.note(at(3), 1000, 8);
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{50, 16}, {100, 16}});
  CHECK(contents.ranges({3, 1}) == std::vector<SectorRange>{{50, 16}, {100, 16}, {1000, 8}});
  CHECK(contents.ranges({0}).empty());
  // Released, the segment starts over.
  contents.forget(1);
  CHECK(contents.ranges({1, 2}) == std::vector<SectorRange>{{7, 1}});
  contents.note(at(1), 200, 8);
  CHECK(contents.ranges({1}) == std::vector<SectorRange>{{200, 8}});
}
