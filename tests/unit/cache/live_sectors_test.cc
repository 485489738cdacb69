#include "cache/live_sectors.h"

#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "cache/extent_index.h"
#include "support/test_scale.h"

using namespace pcached::cache;

namespace {

constexpr uint64_t kDataStart = 8192;
constexpr uint64_t kSegmentSize = 256 * 1024;  // 512 sectors
constexpr uint64_t kSegmentSectors = kSegmentSize / 512;
constexpr uint32_t kSegments = 12;
constexpr uint64_t kDeviceSectors = 2 * ExtentIndex::kStripeSectors + 300;

uint64_t segment_offset(uint32_t segment) { return kDataStart + uint64_t{segment} * kSegmentSize; }

// An index with its bits, live counts and contents lists as the engine wires them, and the
// log-structured placement the engine does: a queue appends into its open segment, GC moves data
// into a segment of its own, released segments go back to a free list with a new generation.
struct Cache {
  LiveSectors live{kDataStart, kSegmentSize, kSegments};
  SegmentActivity activity{kDataStart, kSegmentSize, kSegments};
  SegmentContents contents{kSegments};
  ExtentIndex index;
  std::deque<uint32_t> free;
  std::vector<uint32_t> generation = std::vector<uint32_t>(kSegments, 1);
  std::vector<uint32_t> sealed;
  std::optional<uint32_t> writer, mover;
  uint64_t writer_cursor = 0, mover_cursor = 0;  // sectors from the segment start

  Cache() {
    index.track(&activity, &live, &contents);
    for (uint32_t segment = 0; segment < kSegments; ++segment) free.push_back(segment);
  }

  std::optional<uint32_t> take(bool traced) {
    if (free.empty()) return std::nullopt;
    const uint32_t segment = free.front();
    free.pop_front();
    ++generation[segment];
    if (traced) live.trace(segment, generation[segment]);
    return segment;
  }
  void release(uint32_t segment) {
    contents.forget(segment);
    live.untrace(segment);
    free.push_back(segment);
  }
};

// What one write key said: where its data went.
struct WrittenKey {
  uint64_t sector;
  uint32_t sectors;
  uint64_t seq;
  uint32_t segment;
  uint32_t generation;
  uint64_t location;
};

// Per logical sector: the key that owns it and where its data is (none: not cached, or zeros).
struct Owner {
  uint64_t seq = 0;
  std::optional<uint64_t> location;
};

}  // namespace

TEST_CASE("a key's data is dead by its bits only while its segment is traced and nothing moved out", "[cache][live]") {
  LiveSectors live(kDataStart, kSegmentSize, kSegments);
  SegmentActivity activity(kDataStart, kSegmentSize, kSegments);
  SegmentContents contents(kSegments);
  ExtentIndex index;
  index.track(&activity, &live, &contents);
  const uint64_t location = segment_offset(3) + 4096;
  live.trace(3, 7);
  index.insert(100, 8, location, 1, 0);
  CHECK(live.any(location, 8));
  CHECK_FALSE(live.dead(3, 7, location, 8));
  // Half overwritten (its new data elsewhere): the rest is still live.
  index.insert(100, 4, segment_offset(5), 2, 0);
  CHECK_FALSE(live.dead(3, 7, location, 8));
  CHECK(live.dead(3, 7, location, 4));
  index.insert(104, 4, segment_offset(5) + 2048, 3, 0);
  CHECK(live.dead(3, 7, location, 8));
  // Another generation, or a segment not traced, is never judged by its bits.
  CHECK_FALSE(live.dead(3, 6, location, 8));
  CHECK_FALSE(live.dead(4, 7, location, 8));
  live.untrace(3);
  CHECK_FALSE(live.dead(3, 7, location, 8));

  // GC moves data out: the key it came from keeps its number, so its old place proves nothing.
  live.trace(6, 2);
  const uint64_t old_place = segment_offset(6) + 8192;
  index.insert(500, 16, old_place, 4, 0);
  index.reclaim(contents.ranges({6}), [](uint64_t at) { return at >= segment_offset(6) && at < segment_offset(7); },
                [](uint64_t, const Extent&) {
                  return ExtentIndex::Relocation{ExtentIndex::Relocation::Action::Move, segment_offset(9)};
                });
  CHECK_FALSE(live.any(old_place, 16));
  CHECK(live.any(segment_offset(9), 16));
  CHECK_FALSE(live.dead(6, 2, old_place, 16));

  // Ranges across word boundaries, set and cleared in pieces.
  LiveSectors bits(kDataStart, kSegmentSize, kSegments);
  bits.set(kDataStart + 60 * 512, 10);
  CHECK(bits.any(kDataStart + 63 * 512, 1));
  CHECK(bits.any(kDataStart + 64 * 512, 1));
  CHECK(bits.any(kDataStart + 69 * 512, 1));
  CHECK_FALSE(bits.any(kDataStart + 70 * 512, 200));
  CHECK_FALSE(bits.any(kDataStart, 60));
  bits.clear(kDataStart + 62 * 512, 4);
  CHECK(bits.any(kDataStart + 60 * 512, 2));
  CHECK_FALSE(bits.any(kDataStart + 62 * 512, 4));
  CHECK(bits.any(kDataStart + 66 * 512, 1));
  bits.set(kDataStart, 3 * 64);
  CHECK(bits.any(kDataStart + 128 * 512, 1));
  bits.clear(kDataStart, 3 * 64);
  CHECK_FALSE(bits.any(kDataStart, 3 * 64 + 10));
}

TEST_CASE("the live bits match a model through random writes, trims, discards, overwrites and GC", "[cache][live][gc]") {
  const unsigned seed = GENERATE(1u, 2u, 3u, 4u);
  std::mt19937_64 rng(seed);
  Cache cache;
  std::vector<Owner> owners(kDeviceSectors);
  std::vector<WrittenKey> keys;
  uint64_t seq = 1;
  uint64_t dead_judged = 0;

  // GC of one sealed segment: every extent in it evicted, moved or kept, as `choice` says.
  const auto collect = [&](uint32_t victim) {
    using Action = ExtentIndex::Relocation::Action;
    bool kept = false;
    const auto in_victim = [&](uint64_t at) { return at >= segment_offset(victim) && at < segment_offset(victim + 1); };
    cache.index.reclaim(cache.contents.ranges({victim}, &cache.live), in_victim, [&](uint64_t sector, const Extent& extent) {
      ExtentIndex::Relocation relocation{static_cast<Action>(rng() % 3)};
      if (relocation.action == Action::Move) {
        if (!cache.mover || cache.mover_cursor + extent.sectors > kSegmentSectors) {
          if (cache.mover) cache.sealed.push_back(*cache.mover);
          cache.mover = cache.take(/*traced=*/false);
          cache.mover_cursor = 0;
        }
        if (!cache.mover) {
          relocation.action = Action::Keep;
        } else {
          relocation.location = segment_offset(*cache.mover) + cache.mover_cursor * 512;
          cache.mover_cursor += extent.sectors;
        }
      }
      for (uint64_t s = sector; s < sector + extent.sectors; ++s) {
        if (relocation.action == Action::Evict) owners[s] = Owner{};
        if (relocation.action == Action::Move) *owners[s].location += relocation.location - extent.location;
      }
      kept = kept || relocation.action == Action::Keep;
      return relocation;
    });
    if (kept) return;
    // The list, without what the bits say is dead, found everything the victim held.
    REQUIRE(cache.activity.live_sectors(victim) == 0);
    REQUIRE_FALSE(cache.live.any(segment_offset(victim), kSegmentSectors));
    std::erase(cache.sealed, victim);
    cache.release(victim);
  };

  const auto check = [&] {
    std::map<uint64_t, uint64_t> owner_at;  // location sector -> logical sector
    for (uint64_t s = 0; s < kDeviceSectors; ++s) {
      if (owners[s].location) REQUIRE(owner_at.emplace(*owners[s].location, s).second);
    }
    for (uint64_t at = kDataStart; at < segment_offset(kSegments); at += 512) {
      INFO("location " << at);
      REQUIRE(cache.live.any(at, 1) == owner_at.contains(at));
    }
    // Never dead while the index still holds any of it, wherever it is.
    for (const WrittenKey& key : keys) {
      if (!cache.live.dead(key.segment, key.generation, key.location, key.sectors)) continue;
      ++dead_judged;
      for (uint64_t s = key.sector; s < key.sector + key.sectors; ++s) {
        INFO("key " << key.seq << " sector " << s);
        REQUIRE(owners[s].seq != key.seq);
      }
    }
  };

  const unsigned ops = pcached::testing::scaled(4000);
  for (unsigned op = 0; op < ops; ++op) {
    const uint64_t sector = rng() % (kDeviceSectors - 64);
    const auto sectors = static_cast<uint32_t>(1 + rng() % 64);
    const unsigned kind = static_cast<unsigned>(rng() % 20);
    if (kind < 14) {
      if (!cache.writer || cache.writer_cursor + sectors > kSegmentSectors) {
        if (cache.writer) cache.sealed.push_back(*cache.writer);
        cache.writer.reset();
        while (!(cache.writer = cache.take(/*traced=*/true))) {
          REQUIRE_FALSE(cache.sealed.empty());
          collect(cache.sealed[rng() % cache.sealed.size()]);
        }
        cache.writer_cursor = 0;
      }
      const uint32_t segment = *cache.writer;
      const uint64_t location = segment_offset(segment) + cache.writer_cursor * 512;
      cache.writer_cursor += sectors;
      cache.index.insert(sector, sectors, location, seq, 0);
      keys.push_back({sector, sectors, seq, segment, cache.generation[segment], location});
      for (uint32_t i = 0; i < sectors; ++i) owners[sector + i] = Owner{seq, location + i * 512};
    } else if (kind < 16) {
      cache.index.insert(sector, sectors, 0, seq, Extent::kZero);
      for (uint32_t i = 0; i < sectors; ++i) owners[sector + i] = Owner{seq, std::nullopt};
    } else if (kind < 17) {
      cache.index.discard(sector, sectors, seq);
      for (uint32_t i = 0; i < sectors; ++i) owners[sector + i] = Owner{};
    } else if (kind < 18) {
      cache.index.remove(sector, sectors, seq);
      for (uint32_t i = 0; i < sectors; ++i) owners[sector + i] = Owner{};
    } else if (!cache.sealed.empty()) {
      collect(cache.sealed[rng() % cache.sealed.size()]);
    }
    ++seq;
    if (op % 97 == 0) check();
  }
  check();
  // The bits did judge keys dead (most keys are overwritten in this history).
  CHECK(dead_judged > 0);
}
