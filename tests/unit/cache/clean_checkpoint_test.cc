// The clean checkpoint: a detach keeps the clean data cached for the next
// attach, which uses it once, and only while it is current; whatever it cannot
// trust is read from the backing device.
#include "format/clean_checkpoint.h"

#include <catch2/catch.hpp>
#include <random>

#include "format/layout.h"
#include "support/cache_fixture.h"
#include "support/reference_model.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 16 * MiB;  // 16 segments of 1 MiB
constexpr uint64_t kBackingBytes = 32 * MiB;
constexpr uint64_t kBackingSectors = kBackingBytes / kSector;

// The checkpoint header a region file holds, decoded.
Result<format::CheckpointHeader> stored_header(const std::string& region_path) {
  const auto bytes = read_file(region_path, format::kScratchOffset, format::kCheckpointHeaderSize);
  return format::decode_checkpoint_header(
      std::span<const std::byte, format::kCheckpointHeaderSize>(bytes.data(), bytes.size()),
      read_superblock(region_path).salt());
}

// Reads the two ranges below back, checking every sector; returns the read
// misses that took.
uint64_t read_back(cache::Cache& cache, const Model& model) {
  const uint64_t misses = cache.stats().read_misses + cache.stats().read_partial_hits;
  auto queue = make_queue(cache);
  std::vector<std::byte> buffer(64 * kSector);
  for (uint64_t from : {uint64_t{0}, uint64_t{8192}}) {
    for (uint64_t sector = from; sector < from + 2048; sector += 64) {
      REQUIRE(queue->read(sector, 64, buffer.data()) == 64 * 512);
      model.check(sector, 64, buffer);
    }
  }
  return cache.stats().read_misses + cache.stats().read_partial_hits - misses;
}

// Writes sectors [0, 2048) (1 MiB, written back by the flush) and reads [8192,
// 10240) into the cache (fills), until all 2 MiB are cached (a fill that does
// not fit in what is left of a segment is skipped); the model learns the
// writes.
void write_and_read(cache::Cache& cache, Model& model) {
  {
    auto queue = make_queue(cache);
    for (uint64_t sector = 0; sector < 2048; sector += 64) {
      const auto data = pattern(1000 + sector, sector, 64);
      REQUIRE(queue->write(sector, 64, data.data()) == 64 * 512);
      model.write(sector, 64, 1000 + sector);
    }
  }
  for (int round = 0; round < 4 && read_back(cache, model) != 0; ++round) {
  }
  REQUIRE(cache.flush_all().ok());
  REQUIRE(cache.stats().cached_bytes == 2 * MiB);
}

}  // namespace

TEST_CASE("a cache detached cleanly attaches again with its clean data cached, once", "[cache][checkpoint]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  uint64_t cached = 0;
  {
    auto cache = open_cache(files.options(true));
    write_and_read(*cache, model);
    cached = cache->stats().cached_bytes;
    REQUIRE(cache->detach(false).ok());
  }
  REQUIRE(stored_header(files.region.path()).ok());
  {
    auto cache = open_cache(files.options());
    // Erased by the attach that uses it.
    CHECK(stored_header(files.region.path()).status().code() == ENODATA);
    CHECK(cache->stats().restored_clean_bytes == cached);
    CHECK(cache->stats().cached_bytes == cached);
    CHECK(cache->stats().dirty_bytes == 0);
    CHECK(read_back(*cache, model) == 0);  // every read a hit
    cache->abandon();                      // a crash: no detach, no checkpoint
  }
  auto cache = open_cache(files.options());
  CHECK(cache->stats().restored_clean_bytes == 0);
  CHECK(cache->stats().cached_bytes == 0);
  CHECK(read_back(*cache, model) == 64);  // every read a miss
}

TEST_CASE("after a forced detach the clean data is cached again beside the dirty data replayed",
          "[cache][checkpoint]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  {
    auto cache = open_cache(hold_writeback(files.options(true)));
    write_and_read(*cache, model);
    // Dirty over part of the clean data, and elsewhere.
    auto queue = make_queue(*cache);
    for (uint64_t sector : {uint64_t{512}, uint64_t{9000}, uint64_t{20000}}) {
      const auto data = pattern(5000 + sector, sector, 16);
      REQUIRE(queue->write(sector, 16, data.data()) == 16 * 512);
      model.write(sector, 16, 5000 + sector);
    }
    queue.reset();
    CHECK(cache->stats().dirty_bytes == 3 * 16 * kSector);
    REQUIRE(cache->detach(true).ok());
  }
  auto cache = open_cache(hold_writeback(files.options()));
  const cache::CacheStats stats = cache->stats();
  CHECK(stats.recovered_keys >= 3);
  CHECK(stats.dirty_bytes == 3 * 16 * kSector);
  // The clean data, less what the dirty writes replaced.
  CHECK(stats.restored_clean_bytes == 2 * MiB - 2 * 16 * kSector);
  CHECK(stats.cached_bytes == 2 * MiB + 16 * kSector);
  CHECK(read_back(*cache, model) == 0);
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
}

TEST_CASE("a checkpoint that is not current, or damaged, is not used; extents whose segment was reused are dropped",
          "[cache][checkpoint][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  {
    auto cache = open_cache(files.options(true));
    write_and_read(*cache, model);
    REQUIRE(cache->detach(false).ok());
  }
  const std::vector<std::byte> image = read_file(files.region.path());
  const format::Superblock sb = read_superblock(files.region.path());
  const format::CheckpointHeader header = stored_header(files.region.path()).value();
  REQUIRE(header.extent_count > 0);
  auto attach_with = [&](const std::vector<std::byte>& changed) {
    write_file(files.region.path(), changed);
    return open_cache(files.options());
  };

  SECTION("it belongs to a control-area update that never happened (a cut between the two)") {
    std::vector<std::byte> changed = image;
    format::CheckpointHeader later = header;
    later.control_update_seq += 1;
    format::encode_checkpoint_header(later, sb.salt(),
                                     std::span<std::byte, format::kCheckpointHeaderSize>(
                                         changed.data() + format::kScratchOffset, format::kCheckpointHeaderSize));
    auto cache = attach_with(changed);
    CHECK(cache->stats().restored_clean_bytes == 0);
    CHECK(stored_header(files.region.path()).status().code() == ENODATA);
    CHECK(read_back(*cache, model) == 64);
  }
  SECTION("an extent is damaged") {
    std::vector<std::byte> changed = image;
    changed[format::kCheckpointExtentsOffset + 5] ^= std::byte{0x01};
    auto cache = attach_with(changed);
    CHECK(cache->stats().restored_clean_bytes == 0);
    CHECK(stored_header(files.region.path()).status().code() == ENODATA);
    CHECK(read_back(*cache, model) == 64);
  }
  const auto extents = format::decode_checkpoint_extents(
      header,
      std::span<const std::byte>(image.data() + format::kCheckpointExtentsOffset,
                                 header.extent_count * format::kCheckpointExtentSize),
      sb.salt(), {sb.segment_count, sb.segment_size, kBackingSectors});
  REQUIRE(extents.ok());
  // The first extent's segment, and how much of the checkpoint lies in it.
  const uint32_t first_segment = extents->front().segment;
  uint64_t in_first_segment = 0;
  for (const format::CheckpointExtent& extent : extents.value()) {
    if (extent.segment == first_segment) in_first_segment += extent.sectors * kSector;
  }
  REQUIRE(in_first_segment > 0);

  SECTION("a segment it names has a bad block, wherever in the segment") {
    // Its last page: the extents there are dropped with the rest of the segment's, which stays
    // free and is retired as a segment with a bad block is.
    write_file(files.region.path(), image);
    cache::CacheOptions options = files.options();
    options.injected_bad_ranges.emplace_back(sb.segment_offset(first_segment) + sb.segment_size - 4096, 4096);
    auto cache = open_cache(options);
    CHECK(cache->stats().restored_clean_bytes == 2 * MiB - in_first_segment);
    CHECK(cache->stats().segments_bad == 1);
    const uint64_t misses = read_back(*cache, model);
    CHECK(misses >= in_first_segment / (64 * kSector));
    CHECK(misses < 64);
  }
  SECTION("a segment it names was put to other use") {
    std::vector<std::byte> changed = image;
    const uint32_t reused = first_segment;
    const uint64_t in_reused = in_first_segment;
    REQUIRE(overwrite_as_reused(changed, sb, reused).has_value());
    auto cache = attach_with(changed);
    CHECK(cache->stats().restored_clean_bytes == 2 * MiB - in_reused);
    const uint64_t misses = read_back(*cache, model);
    CHECK(misses >= in_reused / (64 * kSector));
    CHECK(misses < 64);
  }
}

TEST_CASE("random workloads over detach and attach cycles, clean, forced and crashed, match the model",
          "[cache][checkpoint][model]") {
  const uint64_t seed = GENERATE(31, 32, 33);
  INFO("seed " << seed);
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  std::mt19937_64 rng(seed);
  uint64_t restored = 0;
  for (int cycle = 0; cycle < 8; ++cycle) {
    INFO("cycle " << cycle);
    cache::CacheOptions options = files.options(cycle == 0);
    options.tunables.writeback_rate = cycle % 2 == 0 ? 0 : MiB;
    auto cache = open_cache(options);
    restored += cache->stats().restored_clean_bytes;
    {
      auto queue = make_queue(*cache);
      check_everything(*queue, model, 0, kBackingSectors);
      REQUIRE(random_workload(*queue, model, 0, kBackingSectors, seed * 100 + cycle, 600,
                              (static_cast<uint64_t>(cycle) + 1) * 10'000'000) == "");
    }
    switch (rng() % 3) {
      case 0:
        REQUIRE(cache->detach(false).ok());
        break;
      case 1:
        REQUIRE(cache->detach(true).ok());
        break;
      default:
        cache->abandon();
        break;
    }
  }
  auto cache = open_cache(files.options());
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
  CHECK(restored > 0);  // some cycle did start warm
}
