#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "cache/extent_index.h"
#include "support/test_scale.h"

using namespace pcached::cache;

namespace {

// Per-sector truth: which seq owns it and where its data is.
struct SectorModel {
  bool cached = false;
  uint64_t seq = 0;
  uint64_t location = 0;
  uint32_t flags = 0;
};

constexpr uint64_t kSectors = 6 * ExtentIndex::kStripeSectors + 77;

void check_against(const ExtentIndex& index, const std::vector<SectorModel>& model, uint64_t from, uint64_t count) {
  uint64_t expected_sector = from;
  index.lookup(from, static_cast<uint32_t>(count), [&](std::span<const Piece> pieces, uint64_t) {
    for (const Piece& piece : pieces) {
      REQUIRE(piece.sector == expected_sector);
      for (uint64_t s = piece.sector; s < piece.sector + piece.sectors; ++s) {
        INFO("sector " << s);
        REQUIRE(model[s].cached == piece.cached);
        if (!piece.cached) continue;
        REQUIRE(model[s].seq == piece.extent.seq);
        REQUIRE(model[s].flags == piece.extent.flags);
        if (!(piece.extent.flags & Extent::kZero)) {
          REQUIRE(model[s].location == piece.extent.location + (s - piece.sector) * 512);
        }
      }
      expected_sector += piece.sectors;
    }
  });
  REQUIRE(expected_sector == from + count);
}

}  // namespace

TEST_CASE("the index matches a per-sector model under random inserts, removes and fills", "[cache][index]") {
  const uint64_t seed = GENERATE(1, 2, 3, 4, 5);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  ExtentIndex index;
  std::vector<SectorModel> model(kSectors);
  uint64_t next_seq = 1;
  uint64_t next_location = 1 << 20;

  const unsigned operations = pcached::testing::scaled(4000);
  for (unsigned op = 0; op < operations; ++op) {
    const uint64_t sector = rng() % kSectors;
    const uint32_t sectors = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(3000, kSectors - sector));
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 6) {
      // Mostly increasing sequence numbers, sometimes an older key arriving late.
      const uint64_t seq = (rng() % 8 == 0 && next_seq > 10) ? next_seq - 1 - rng() % 10 : next_seq++;
      const uint32_t flags = rng() % 6 == 0 ? Extent::kZero : 0;
      const uint64_t location = next_location;
      next_location += sectors * 512;
      index.insert(sector, sectors, location, seq, flags);
      for (uint64_t s = sector; s < sector + sectors; ++s) {
        if (model[s].cached && model[s].seq > seq) continue;
        model[s] = {true, seq, location + (s - sector) * 512, flags};
      }
    } else if (kind < 8) {
      const uint64_t seq = next_seq++;
      index.remove(sector, sectors, seq);
      for (uint64_t s = sector; s < sector + sectors; ++s) {
        if (model[s].cached && model[s].seq < seq) model[s] = {};
      }
    } else {
      // A fill: only into a range found empty, and only if nothing changed meanwhile.
      const uint64_t stripe_end = (sector | (ExtentIndex::kStripeSectors - 1)) + 1;
      const uint32_t length = static_cast<uint32_t>(std::min<uint64_t>(sectors, stripe_end - sector));
      bool empty = true;
      uint64_t change_count = 0;
      index.lookup(sector, length, [&](std::span<const Piece> pieces, uint64_t count) {
        change_count = count;
        for (const Piece& piece : pieces) empty = empty && !piece.cached;
      });
      if (!empty) continue;
      const bool race = rng() % 4 == 0;
      if (race) index.insert(sector, 1, 0, next_seq++, Extent::kZero);
      const bool filled = index.insert_fill(sector, length, next_location, change_count);
      CHECK(filled == !race);
      if (race) model[sector] = {true, next_seq - 1, 0, Extent::kZero};
      if (filled) {
        for (uint64_t s = sector; s < sector + length; ++s) model[s] = {true, 0, next_location + (s - sector) * 512, Extent::kFill};
      }
      next_location += length * 512;
    }
    if (op % 97 == 0) check_against(index, model, 0, kSectors);
  }
  check_against(index, model, 0, kSectors);
  uint64_t cached = 0;
  for (const SectorModel& s : model) cached += s.cached;
  CHECK(index.cached_sectors() == cached);
}

TEST_CASE("live pieces are what a key still owns", "[cache][index]") {
  ExtentIndex index;
  index.insert(100, 100, 1 << 20, 5, 0);
  index.insert(120, 10, 2 << 20, 6, 0);
  const auto live = index.live_pieces(100, 100, 5);
  REQUIRE(live.size() == 2);
  CHECK(live[0].sector == 100);
  CHECK(live[0].sectors == 20);
  CHECK(live[1].sector == 130);
  CHECK(live[1].sectors == 70);
  CHECK(live[1].extent.location == (1 << 20) + 30 * 512);
  CHECK(index.live_pieces(100, 100, 6).size() == 1);
  CHECK(index.sectors_at_or_above(6) == 10);
  CHECK(index.sectors_at_or_above(0) == 100);
}

TEST_CASE("eviction by location removes exactly the extents in the range", "[cache][index]") {
  ExtentIndex index;
  index.insert(0, 8, 1000 * 512, 1, 0);
  index.insert(5000, 8, 2000 * 512, 2, 0);
  index.insert(9000, 8, 0, 3, Extent::kZero);
  const auto in_range = [](uint64_t location) { return location >= 1000 * 512 && location < 1008 * 512; };
  const auto evict = [](uint64_t, const Extent&) { return ExtentIndex::Relocation{}; };
  SECTION("looking where the data is") {
    // Only the sectors named are looked at: data elsewhere is not found even where it matches.
    CHECK(index.reclaim(std::vector<SectorRange>{{4000, 4096}}, in_range, evict) == 0);
    CHECK(index.extents() == 3);
    CHECK(index.reclaim(std::vector<SectorRange>{{4, 2}, {7, 100}}, in_range, evict) == 8);
  }
  SECTION("looking everywhere") { CHECK(index.reclaim_everywhere(in_range, evict) == 8); }
  CHECK(index.extents() == 2);
  CHECK(index.live_pieces(0, 8, 1).empty());
  CHECK(index.live_pieces(5000, 8, 2).size() == 1);
}

TEST_CASE("an extent reaching over several ranges is decided on once", "[cache][index][gc]") {
  ExtentIndex index;
  index.insert(0, 64, 1000 * 512, 1, 0);
  int decisions = 0;
  index.reclaim(std::vector<SectorRange>{{0, 8}, {16, 8}, {40, 4}}, [](uint64_t) { return true; },
                [&](uint64_t, const Extent&) {
                  ++decisions;
                  return ExtentIndex::Relocation{ExtentIndex::Relocation::Action::Keep};
                });
  CHECK(decisions == 1);
}

TEST_CASE("live sectors and contents per segment follow inserts, overwrites, discards, evictions and moves", "[cache][index][gc]") {
  constexpr uint64_t kSegment = 1 << 20;  // 2048 sectors
  SegmentActivity activity(0, kSegment, 8);
  SegmentContents contents(8);
  ExtentIndex index;
  index.track(&activity, /*live=*/nullptr, &contents);  // locations overlap here: no bits
  std::mt19937_64 rng(3);
  // A random history; the truth is recounted from a model of which location each sector has.
  std::vector<int64_t> location_of(8192, -1);
  uint64_t seq = 1;
  for (int op = 0; op < 3000; ++op) {
    const uint64_t sector = rng() % 8000;
    const auto sectors = static_cast<uint32_t>(1 + rng() % 150);
    const unsigned kind = static_cast<unsigned>(rng() % 10);
    if (kind < 7) {
      const uint64_t segment = rng() % 8;
      const uint64_t location = segment * kSegment + (rng() % (2048 - sectors)) * 512;
      index.insert(sector, sectors, location, seq++, kind == 0 ? Extent::kZero : 0);
      for (uint32_t i = 0; i < sectors; ++i) {
        location_of[sector + i] = kind == 0 ? -1 : static_cast<int64_t>(location + i * 512);
      }
    } else if (kind < 9) {
      index.remove(sector, sectors, seq++);
      for (uint32_t i = 0; i < sectors; ++i) location_of[sector + i] = -1;
    } else {
      // GC reclaims a segment: its data is evicted, moved to the next segment at the same offset,
      // or (dirty data with nowhere to go) kept where it is.
      using Action = ExtentIndex::Relocation::Action;
      const uint64_t victim = rng() % 8;
      const auto action = static_cast<Action>(rng() % 3);
      const int64_t shift = (static_cast<int64_t>((victim + 1) % 8) - static_cast<int64_t>(victim)) * kSegment;
      // GC looks only where the victim's contents list says: that must find all of its data.
      index.reclaim(contents.ranges({static_cast<uint32_t>(victim)}),
                    [&](uint64_t location) { return location / kSegment == victim; },
                    [&](uint64_t, const Extent& extent) {
                      return ExtentIndex::Relocation{action, action == Action::Move ? extent.location + shift : 0};
                    });
      if (action != Action::Keep) {
        REQUIRE(activity.live_sectors(static_cast<uint32_t>(victim)) == 0);
        contents.forget(static_cast<uint32_t>(victim));  // released: its next data is noted afresh
      }
      for (int64_t& location : location_of) {
        if (location < 0 || static_cast<uint64_t>(location) / kSegment != victim || action == Action::Keep) continue;
        location = action == Action::Move ? location + shift : -1;
      }
    }
  }
  // Every sector is where the model says: moved data at its new place, evicted data gone.
  for (uint64_t sector = 0; sector < 8192; ++sector) {
    int64_t found = -1;
    index.lookup(sector, 1, [&](std::span<const Piece> pieces, uint64_t) {
      for (const Piece& piece : pieces) {
        if (piece.cached && piece.extent.has_data()) found = static_cast<int64_t>(piece.extent.location);
      }
    });
    INFO("sector " << sector);
    REQUIRE(found == location_of[sector]);
  }
  std::vector<uint64_t> expected(8, 0);
  for (int64_t location : location_of) {
    if (location >= 0) ++expected[static_cast<uint64_t>(location) / kSegment];
  }
  for (uint32_t segment = 0; segment < 8; ++segment) CHECK(activity.live_sectors(segment) == expected[segment]);
}

TEST_CASE("a discard's tombstone hides a write numbered before it but applied after it", "[cache][index][discard]") {
  // Queue B numbers a write (seq 9), queue A numbers and applies a discard (seq 10), then B applies
  // its write. Replay in sequence order leaves the range discarded; so must the running index.
  ExtentIndex index;
  index.insert(0, 8, 4096, 5, 0);
  index.discard(0, 8, 10);
  index.insert(0, 8, 8192, 9, 0);
  auto pieces_of = [&](uint64_t sector, uint32_t sectors) {
    std::vector<Piece> found;
    uint64_t change_count = 0;
    index.lookup(sector, sectors, [&](std::span<const Piece> pieces, uint64_t count) {
      found.assign(pieces.begin(), pieces.end());
      change_count = count;
    });
    return std::make_pair(found, change_count);
  };
  auto [pieces, change_count] = pieces_of(0, 8);
  REQUIRE(pieces.size() == 1);
  CHECK_FALSE(pieces[0].cached);
  CHECK(pieces[0].discarded());  // reads as zeros, not from the backing device
  CHECK(index.cached_sectors() == 0);
  CHECK(index.sectors_at_or_above(0) == 0);
  // Not cached, but dirty for anyone who would write to the device under the pending discard.
  CHECK(index.probe(0, 8, 10).dirty);
  CHECK_FALSE(index.probe(0, 8, 10).cached);
  CHECK_FALSE(index.probe(0, 8, 11).dirty);

  // A fill of the gap does not cover the tombstone; a newer write does.
  CHECK(index.insert_fill(0, 8, 12288, change_count));
  CHECK(pieces_of(0, 8).first[0].discarded());
  index.insert(4, 4, 16384, 11, 0);
  std::tie(pieces, change_count) = pieces_of(0, 8);
  REQUIRE(pieces.size() == 2);
  CHECK(pieces[0].discarded());
  CHECK((pieces[1].cached && pieces[1].extent.seq == 11 && pieces[1].sector == 4));
  CHECK(index.cached_sectors() == 4);

  // Once writeback has passed the discard, the tombstone goes and the gap can be filled.
  index.drop_tombstones(0, 8, 11);
  std::tie(pieces, change_count) = pieces_of(0, 4);
  REQUIRE(pieces.size() == 1);
  CHECK_FALSE((pieces[0].cached || pieces[0].discarded()));  // a gap: read from the backing device
  CHECK(index.insert_fill(0, 4, 12288, change_count));
  std::tie(pieces, change_count) = pieces_of(0, 8);
  REQUIRE(pieces.size() == 2);
  CHECK((pieces[0].cached && (pieces[0].extent.flags & Extent::kFill)));
  CHECK(index.cached_sectors() == 8);
}
