// The persistence domain decides whether writeback may keep dirty data on a region (issue 8).
#include <algorithm>
#include <catch2/catch.hpp>

#include "cache/persistence_policy.h"
#include "format/layout.h"
#include "format/superblock.h"
#include "support/cache_fixture.h"

using namespace pcached;
using namespace pcached::testing;
using pmem::PersistenceDomain;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 16 * MiB;

Result<std::unique_ptr<cache::Cache>> open_with(const cache::CacheOptions& options, const char* granularity) {
  ForcedGranularity forced(granularity);
  return cache::Cache::open(options);
}

format::Superblock superblock_copy(const CacheFiles& files, unsigned copy) {
  const std::vector<std::byte> bytes = read_file(files.region.path());
  auto sb = format::decode_superblock(
      std::span<const std::byte, format::kSuperblockSize>(bytes.data() + format::kSuperblockOffsets[copy],
                                                          format::kSuperblockSize));
  REQUIRE(sb.ok());
  return sb.value();
}

}  // namespace

TEST_CASE("the decision table: domain x mode x override", "[cache][persistence-domain]") {
  struct Row {
    PersistenceDomain domain;
    bool survives;
  };
  for (const Row row : {Row{PersistenceDomain::CpuCache, true}, Row{PersistenceDomain::MemoryController, true},
                        Row{PersistenceDomain::None, false}, Row{PersistenceDomain::Unknown, false},
                        Row{PersistenceDomain::VolatileTest, false}}) {
    CHECK(pmem::survives_power_loss(row.domain) == row.survives);
    for (cache::CacheMode mode :
         {cache::CacheMode::Writeback, cache::CacheMode::Writethrough, cache::CacheMode::Writearound}) {
      for (bool override_given : {false, true}) {
        INFO(pmem::to_string(row.domain) << " " << cache::to_string(mode) << " override " << override_given);
        const Status status = cache::check_mode_for_domain("/dev/dax9.9", row.domain, mode, override_given);
        const bool expected = mode != cache::CacheMode::Writeback || row.survives || override_given;
        CHECK(status.ok() == expected);
        if (!status.ok()) {
          // The message names the region, the domain and both ways out.
          CHECK(status.message().find("/dev/dax9.9") != std::string::npos);
          CHECK(status.message().find("persistence domain is " + std::string(pmem::to_string(row.domain))) !=
                std::string::npos);
          CHECK(status.message().find("--mode writethrough or --mode writearound") != std::string::npos);
          CHECK(status.message().find("--allow-volatile-writeback") != std::string::npos);
        }
      }
    }
  }
  CHECK(pmem::parse_ndctl_domain("cpu_cache") == PersistenceDomain::CpuCache);
  CHECK(pmem::parse_ndctl_domain("memory_controller") == PersistenceDomain::MemoryController);
  CHECK(pmem::parse_ndctl_domain("none") == PersistenceDomain::None);
  CHECK(pmem::parse_ndctl_domain("") == PersistenceDomain::Unknown);
  CHECK(pmem::parse_ndctl_domain("unknown") == PersistenceDomain::Unknown);
}

TEST_CASE("a plain file is volatile/test; byte granularity is eADR", "[cache][persistence-domain]") {
  ScratchFile file(kRegionBytes);
  pmem::RegionOptions options;
  options.path = file.path();
  options.allow_volatile = true;
  {
    ForcedGranularity page(nullptr);
    auto region = pmem::Region::open(options);
    REQUIRE(region.ok());
    CHECK(pmem::persistence_domain_of(*region.value(), {}) == PersistenceDomain::VolatileTest);
  }
  {
    // Cache-line granularity, but not on any pmem namespace libndctl knows.
    ForcedGranularity cache_line("CACHE_LINE");
    auto region = pmem::Region::open(options);
    REQUIRE(region.ok());
    pmem::RegionInfo other;
    other.persistence_domain = "memory_controller";
    other.namespaces.push_back({"namespace0.0", "fsdax", "/dev/pmem0", 1 * GiB, 2 * MiB, 0});
    CHECK(pmem::persistence_domain_of(*region.value(), {other}) == PersistenceDomain::VolatileTest);
  }
  {
    ForcedGranularity byte("BYTE");
    auto region = pmem::Region::open(options);
    REQUIRE(region.ok());
    CHECK(pmem::persistence_domain_of(*region.value(), {}) == PersistenceDomain::CpuCache);
  }
}

TEST_CASE("writeback on a volatile region is refused without the override, before anything is written",
          "[cache][persistence-domain][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.allow_volatile_writeback = false;
  auto refused = open_with(options, "CACHE_LINE");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == EPERM);
  CHECK(refused.status().message().find("persistence domain is volatile/test") != std::string::npos);
  // Nothing was formatted.
  const std::vector<std::byte> region = read_file(files.region.path());
  CHECK(std::all_of(region.begin(), region.end(), [](std::byte b) { return b == std::byte{0}; }));

  // Writethrough and writearound are always allowed; switching them to writeback is not.
  options.tunables.mode = cache::CacheMode::Writethrough;
  auto cache = open_with(options, "CACHE_LINE");
  REQUIRE(cache.ok());
  CHECK(cache.value()->stats().persistence_domain == "volatile/test");
  CHECK_FALSE(cache.value()->stats().volatile_writeback);
  const Status to_writeback = cache.value()->set("mode", "writeback");
  REQUIRE_FALSE(to_writeback.ok());
  CHECK(to_writeback.message().find("--allow-volatile-writeback") != std::string::npos);
  CHECK(cache.value()->tunables().mode == cache::CacheMode::Writethrough);
  REQUIRE(cache.value()->set("mode", "writearound").ok());
}

TEST_CASE("the override is recorded in the superblock and kept by later attaches", "[cache][persistence-domain]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.allow_volatile_writeback = true;
  {
    auto cache = open_with(options, "CACHE_LINE");
    REQUIRE(cache.ok());
    CHECK(cache.value()->stats().volatile_writeback);
    REQUIRE(cache.value()->detach(false).ok());
  }
  for (unsigned copy : {0u, 1u}) {
    CHECK((superblock_copy(files, copy).flags & format::Superblock::kAllowVolatileWriteback) != 0);
  }
  cache::CacheOptions again = files.options(false);
  again.allow_volatile_writeback = false;
  auto cache = open_with(again, "CACHE_LINE");
  REQUIRE(cache.ok());
  CHECK(cache.value()->tunables().mode == cache::CacheMode::Writeback);
  CHECK(cache.value()->stats().volatile_writeback);
}

TEST_CASE("superblock copies that differ only in flags (an update cut short) attach from copy 0",
          "[cache][persistence-domain][crash]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.allow_volatile_writeback = false;
  options.tunables.mode = cache::CacheMode::Writethrough;
  {
    auto cache = open_with(options, "CACHE_LINE");
    REQUIRE(cache.ok());
    REQUIRE(cache.value()->detach(false).ok());
  }
  // Copy 0 got the flag, copy 1 did not: power failed between the two writes.
  format::Superblock sb = superblock_copy(files, 0);
  sb.flags |= format::Superblock::kAllowVolatileWriteback;
  std::array<std::byte, format::kSuperblockSize> bytes;
  format::encode_superblock(sb, bytes);
  {
    std::FILE* region = std::fopen(files.region.path().c_str(), "r+b");
    std::fseek(region, static_cast<long>(format::kSuperblockOffsets[0]), SEEK_SET);
    std::fwrite(bytes.data(), 1, bytes.size(), region);
    std::fclose(region);
  }
  cache::CacheOptions again = files.options(false);
  again.allow_volatile_writeback = false;
  auto cache = open_with(again, "CACHE_LINE");
  REQUIRE(cache.ok());
  CHECK(cache.value()->stats().volatile_writeback);  // writeback mode, allowed by copy 0's flag
  CHECK((superblock_copy(files, 1).flags & format::Superblock::kAllowVolatileWriteback) != 0);
}

TEST_CASE("on an eADR region (byte granularity) writeback needs no override", "[cache][persistence-domain][eadr]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.allow_volatile_writeback = false;
  auto cache = open_with(options, "BYTE");
  REQUIRE(cache.ok());
  CHECK(cache.value()->stats().persistence_domain == "cpu_cache");
  CHECK_FALSE(cache.value()->stats().volatile_writeback);
}
