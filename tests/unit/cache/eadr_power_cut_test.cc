// Power cuts on an eADR region (byte granularity): the engine writes with the flushless cached
// copy and skips flushes; the simulator keeps cached stores only once the writing thread fenced.
// Every acknowledged write must still be there after recovery, untorn: the fences alone must be
// in the right order.
#include <catch2/catch.hpp>
#include <mutex>
#include <optional>
#include <random>

#include "format/layout.h"
#include "pmem/persistence_simulator.h"
#include "support/cache_fixture.h"
#include "support/test_scale.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 16 * MiB;
constexpr uint64_t kSectors = kBackingBytes / kSector;

cache::CacheOptions eadr_options(const CacheFiles& files, bool format) {
  cache::CacheOptions options = files.options(format);
  options.allow_volatile_writeback = false;  // cpu_cache: no override needed
  options.copy_policy.spec = pmem::parse_policy_spec("cached").value();
  return options;
}

// Opens the image a cut left and checks every sector against the last acknowledged write.
std::string recover_and_check(const std::vector<std::byte>& image, const std::vector<std::byte>& backing,
                              const std::vector<uint64_t>& acknowledged) {
  CacheFiles copy(0, 0);
  write_file(copy.region.path(), image);
  write_file(copy.backing.path(), backing);
  cache::CacheOptions options = eadr_options(copy, false);
  options.force = true;  // the backing copy is another inode
  ForcedGranularity byte("BYTE");
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) return "recovery failed: " + cache.status().message();
  std::string failure;
  {
    auto queue = make_queue(*cache.value());
    std::vector<std::byte> buffer(256 * kSector);
    for (uint64_t sector = 0; sector < kSectors && failure.empty(); sector += 256) {
      if (queue->read(sector, 256, buffer.data()) != 256 * static_cast<int>(kSector)) {
        failure = "read failed at " + std::to_string(sector);
        break;
      }
      for (uint64_t i = 0; i < 256; ++i) {
        const uint64_t got = decode_sector(buffer.data() + i * kSector, sector + i);
        if (got == UINT64_MAX || got < acknowledged[sector + i]) {
          failure = "sector " + std::to_string(sector + i) + " holds " + std::to_string(got) + ", write " +
                    std::to_string(acknowledged[sector + i]) + " was acknowledged";
          break;
        }
      }
    }
  }
  cache.value()->abandon();
  return failure;
}

}  // namespace

TEST_CASE("power cuts on eADR with flushless copies lose no acknowledged write", "[cache][crash][power-cut][eadr]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  {
    ForcedGranularity byte("BYTE");
    auto formatted = cache::Cache::open(eadr_options(files, true));
    REQUIRE(formatted.ok());
    formatted.value()->abandon();
  }
  pmem::RegionOptions region_options;
  region_options.path = files.region.path();
  region_options.min_size = 0;
  std::unique_ptr<pmem::Region> view;
  {
    ForcedGranularity byte("BYTE");
    view = std::move(pmem::Region::open(region_options).value());
  }
  REQUIRE(view->granularity() == pmem::Granularity::Byte);
  pmem::PersistenceSimulator simulator(*view);
  cache::CacheOptions options = eadr_options(files, false);
  options.persist_observer = &simulator;
  std::unique_ptr<cache::Cache> cache;
  {
    ForcedGranularity byte("BYTE");
    cache = std::move(cache::Cache::open(options).value());
  }
  CHECK(cache->stats().persistence_domain == "cpu_cache");
  auto queue = make_queue(*cache);

  std::mt19937_64 rng(23);
  std::mutex mutex;
  std::vector<std::pair<uint64_t, std::pair<uint64_t, uint32_t>>> acks;  // event count, (id, where)
  std::vector<std::pair<uint64_t, uint32_t>> placed;                      // by id - 1: (sector, sectors)
  struct Cut {
    std::vector<std::byte> image, backing;
    std::vector<uint64_t> acknowledged;
  };
  std::optional<Cut> captured;
  unsigned cuts = 0;
  auto arm = [&] {
    pmem::PersistenceSimulator::PowerCut cut;
    cut.keep_unpersisted = (cuts % 3) * 0.5;  // none, half, all of what was not fenced
    cut.tear_words = cuts % 3 == 1;
    cut.seed = cuts;
    const uint64_t at = simulator.events() + 1 + rng() % 300;
    simulator.arm_cut(at, cut, [&, at](std::vector<std::byte> image) {
      Cut c{std::move(image), read_file(files.backing.path()), std::vector<uint64_t>(kSectors, 0)};
      std::lock_guard lock(mutex);
      for (const auto& [events, write] : acks) {
        if (events >= at) continue;
        const auto [sector, sectors] = placed[write.first - 1];
        for (uint32_t i = 0; i < sectors; ++i) c.acknowledged[sector + i] = std::max(c.acknowledged[sector + i], write.first);
      }
      captured = std::move(c);
    });
  };
  arm();
  uint64_t id = 1;
  // Fewer under ThreadSanitizer (PCACHED_TEST_SCALE), where each check takes ten times as long.
  const unsigned cut_count = std::max(30u, scaled(120));
  while (cuts < cut_count) {
    const uint64_t sector = rng() % (kSectors - 64);
    const auto sectors = static_cast<uint32_t>(1 + rng() % 64);
    const auto data = pattern(id, sector, sectors);
    {
      std::lock_guard lock(mutex);
      placed.emplace_back(sector, sectors);
    }
    REQUIRE(queue->write(sector, sectors, data.data()) == static_cast<int>(sectors * kSector));
    // Read before taking the lock: the cut handler runs under the simulator's lock and takes ours.
    const uint64_t events = simulator.events();
    {
      std::lock_guard lock(mutex);
      acks.push_back({events, {id, 0}});
    }
    ++id;
    if (simulator.cut_done()) {
      std::optional<Cut> cut;
      {
        std::lock_guard lock(mutex);
        cut.swap(captured);
      }
      REQUIRE(cut.has_value());
      INFO("cut " << cuts);
      REQUIRE(recover_and_check(cut->image, cut->backing, cut->acknowledged) == "");
      ++cuts;
      arm();
    }
  }
  // The copies really were flushless: no flush instruction ran for data.
  const cache::CacheStats stats = cache->stats();
  uint64_t cached_copies = 0;
  for (uint64_t n : stats.copies[static_cast<size_t>(pmem::CopyMethod::Cached)]) cached_copies += n;
  CHECK(cached_copies > 0);
  queue.reset();
  cache->abandon();
}
