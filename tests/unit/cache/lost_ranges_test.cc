#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "cache/extent_index.h"
#include "cache/lost_ranges.h"

using namespace pcached;
using format::LostRange;

namespace {

// The newest key per sector (0: not lost) of a list, as a plain array.
std::vector<uint64_t> per_sector(const std::vector<LostRange>& ranges, size_t sectors) {
  std::vector<uint64_t> seqs(sectors, 0);
  for (const LostRange& range : ranges) {
    for (uint64_t s = range.sector; s < range.sector + range.sectors; ++s) seqs.at(s) = std::max(seqs.at(s), range.seq);
  }
  return seqs;
}

bool sorted_and_disjoint(const std::vector<LostRange>& ranges) {
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].sectors == 0) return false;
    if (i > 0 && ranges[i].sector < ranges[i - 1].sector + ranges[i - 1].sectors) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("lost ranges: the newer key wins where ranges overlap, and the list stays sorted and disjoint",
          "[cache][lost]") {
  std::vector<LostRange> ranges = cache::add_lost_ranges({}, std::vector<LostRange>{{100, 50, 7}});
  ranges = cache::add_lost_ranges(ranges, std::vector<LostRange>{{120, 10, 9}, {90, 20, 5}});
  CHECK(ranges == std::vector<LostRange>{{90, 10, 5}, {100, 20, 7}, {120, 10, 9}, {130, 20, 7}});
  // The same key's ranges side by side become one.
  CHECK(cache::add_lost_ranges(std::vector<LostRange>{{0, 8, 3}}, std::vector<LostRange>{{8, 8, 3}}) ==
        std::vector<LostRange>{{0, 16, 3}});

  // Randomly, against a per-sector model (few enough ranges that none are merged).
  std::mt19937_64 rng(4);
  for (int round = 0; round < 200; ++round) {
    std::vector<LostRange> list, all;
    for (int i = 0; i < 1 + static_cast<int>(rng() % 20); ++i) {
      std::vector<LostRange> added;
      for (int j = 0; j < 1 + static_cast<int>(rng() % 3); ++j) {
        added.push_back({rng() % 500, static_cast<uint32_t>(1 + rng() % 40), 1 + rng() % 1000});
      }
      list = cache::add_lost_ranges(list, added);
      all.insert(all.end(), added.begin(), added.end());
      REQUIRE(sorted_and_disjoint(list));
      REQUIRE(per_sector(list, 600) == per_sector(all, 600));
    }
  }
}

TEST_CASE("lost ranges beyond the bound merge the closest, keeping every lost sector and the newest key",
          "[cache][lost]") {
  std::vector<LostRange> ranges;
  for (uint64_t i = 0; i < 10; ++i) ranges.push_back({i * 100 - (i == 6 ? 40 : 0), 8, 10 + i});
  const std::vector<LostRange> before = ranges;
  cache::coalesce_lost_ranges(ranges, 9);
  REQUIRE(ranges.size() == 9);
  // Ranges 5 (at 500) and 6 (at 560) are the closest: one range from 500 to 568, key 16.
  CHECK(ranges[5] == LostRange{500, 68, 16});
  for (const LostRange& range : before) {
    for (uint64_t s = range.sector; s < range.sector + range.sectors; ++s) CHECK(per_sector(ranges, 1000)[s] >= range.seq);
  }
  cache::coalesce_lost_ranges(ranges, 1);
  CHECK(ranges == std::vector<LostRange>{{0, 908, 19}});
}

TEST_CASE("what is still lost: what an extent marked lost covers, not what was written or discarded since",
          "[cache][lost]") {
  cache::ExtentIndex index;
  index.insert(0, 16, 0, 5, cache::Extent::kZero | cache::Extent::kLost);
  index.insert(100, 8, 4096, 6, 0);
  index.mark(100, 8, 6, cache::Extent::kLost);
  const std::vector<LostRange> lost{{0, 16, 5}, {100, 8, 6}};
  CHECK(cache::still_lost(index, lost) == lost);
  index.insert(4, 4, 8192, 9, 0);  // written again
  index.discard(104, 4, 10);
  CHECK(cache::still_lost(index, lost) == std::vector<LostRange>{{0, 4, 5}, {8, 8, 5}, {100, 4, 6}});
  index.insert(0, 16, 12288, 11, 0);
  index.insert(100, 8, 16384, 12, 0);
  CHECK(cache::still_lost(index, lost).empty());
}
