// Attaching and formatting: what is refused, with which message, and that refusing writes nothing.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <random>

#include "format/layout.h"
#include "format/superblock.h"
#include "support/cache_fixture.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 16 * MiB;

Result<std::unique_ptr<cache::Cache>> try_open(const cache::CacheOptions& options) {
  ForcedGranularity cache_line("CACHE_LINE");
  return cache::Cache::open(options);
}

void expect_refusal(const cache::CacheOptions& options, const std::string& words) {
  auto cache = try_open(options);
  REQUIRE_FALSE(cache.ok());
  INFO(cache.status().message());
  CHECK(cache.status().message().find(words) != std::string::npos);
  CHECK(cache.status().message().find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("a blank region is not attached without --format", "[cache][attach][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  expect_refusal(files.options(), "is blank: it holds no cache; format it (--format)");
}

// Refusals are decided before the first store, with a fixed copy method and with one calibrated on
// the region (calibration writes to the region's scratch area).
cache::CacheOptions maybe_calibrating(cache::CacheOptions options, bool calibrate) {
  if (calibrate) options.copy_policy.spec = pmem::parse_policy_spec("auto").value();
  return options;
}

TEST_CASE("a region holding another program's data is refused without writing a byte", "[cache][attach][bad-input]") {
  const bool calibrate = GENERATE(false, true);
  CacheFiles files(kRegionBytes, kBackingBytes);
  std::vector<std::byte> foreign(2 * MiB);
  std::mt19937_64 rng(3);
  for (auto& b : foreign) b = static_cast<std::byte>(rng());
  {
    const int fd = ::open(files.region.path().c_str(), O_WRONLY);
    REQUIRE(::pwrite(fd, foreign.data(), foreign.size(), 0) == static_cast<ssize_t>(foreign.size()));
    ::close(fd);
  }
  const auto before = read_file(files.region.path());
  expect_refusal(maybe_calibrating(files.options(), calibrate), "holds data that is not a pcached cache; nothing was written");
  CHECK((read_file(files.region.path()) == before));  // parenthesised: no dump of both images
  // Explicitly formatting it is allowed.
  auto formatted = try_open(files.options(true));
  REQUIRE(formatted.ok());
  formatted.value()->abandon();
}

TEST_CASE("formatting over an existing cache needs --force", "[cache][attach][bad-input]") {
  const bool calibrate = GENERATE(false, true);
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(true))->abandon();
  const auto before = read_file(files.region.path());
  expect_refusal(maybe_calibrating(files.options(true), calibrate), "formatting destroys it, including dirty data not yet written back; add --force");
  CHECK((read_file(files.region.path()) == before));  // parenthesised: no dump of both images
  cache::CacheOptions forced = files.options(true);
  forced.force = true;
  auto cache = try_open(forced);
  REQUIRE(cache.ok());
  cache.value()->abandon();
}

TEST_CASE("a cache is refused on another backing device unless forced; never on a smaller one",
          "[cache][attach][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(true))->abandon();
  ScratchFile other(kBackingBytes);
  cache::CacheOptions options = files.options();
  options.backing_path = other.path();
  expect_refusal(options, "the cache belongs to backing file");
  options.force = true;
  auto forced = try_open(options);
  REQUIRE(forced.ok());
  forced.value()->abandon();

  ScratchFile smaller(kBackingBytes / 2);
  options.backing_path = smaller.path();
  expect_refusal(options, "smaller than the 16 MiB this cache was made for");
}

TEST_CASE("a region formatted by a newer pcached is refused", "[cache][attach][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(true))->abandon();
  format::Superblock sb;
  {
    const auto bytes = read_file(files.region.path());
    sb = format::decode_superblock(std::span<const std::byte, format::kSuperblockSize>(bytes.data(), format::kSuperblockSize)).value();
  }
  sb.version = format::kFormatVersion + 1;
  std::array<std::byte, format::kSuperblockSize> encoded;
  format::encode_superblock(sb, encoded);
  const int fd = ::open(files.region.path().c_str(), O_WRONLY);
  for (uint64_t offset : format::kSuperblockOffsets) REQUIRE(::pwrite(fd, encoded.data(), encoded.size(), offset) == 256);
  ::close(fd);
  const auto before = read_file(files.region.path());
  expect_refusal(maybe_calibrating(files.options(), GENERATE(false, true)),
                 "was written by a newer pcached; this build reads version 1; upgrade pcached");
  CHECK((read_file(files.region.path()) == before));  // parenthesised: no dump of both images
}

TEST_CASE("bad geometry and settings are refused with the reason", "[cache][attach][bad-input]") {
  SECTION("a region smaller than any cache") {
    CacheFiles files(format::kDataStart + 4 * MiB, kBackingBytes);
    expect_refusal(files.options(true), "is 14 MiB; a pmem region must be at least 18 MiB");
  }
  SECTION("a region too small for the minimum number of segments of the chosen size") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    cache::CacheOptions options = files.options(true);
    options.segment_size = 2 * MiB;
    expect_refusal(options, "is too small for 8 segments of 2 MiB (needs at least 26 MiB)");
  }
  SECTION("a segment size that is not a power of two") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    cache::CacheOptions options = files.options(true);
    options.segment_size = 3 * MiB;
    expect_refusal(options, "must be a power of two between 1 MiB and 1 GiB");
  }
  SECTION("a GC threshold above 90%") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    cache::CacheOptions options = files.options(true);
    options.tunables.gc_threshold = 95;
    expect_refusal(options, "gc_threshold: '95' is not a percentage from 0 to 90");
  }
  SECTION("a backing path that does not exist") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    cache::CacheOptions options = files.options(true);
    options.backing_path = "/nonexistent/backing";
    expect_refusal(options, "backing device /nonexistent/backing: No such file or directory");
  }
  SECTION("a backing directory") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    cache::CacheOptions options = files.options(true);
    options.backing_path = "/dev/shm";
    expect_refusal(options, "is neither a block device nor a regular file");
  }
  SECTION("a backing file already used by another cache") {
    CacheFiles files(kRegionBytes, kBackingBytes);
    auto cache = open_cache(files.options(true));
    CacheFiles second(kRegionBytes, 0);
    cache::CacheOptions options = second.options(true);
    options.backing_path = files.backing.path();
    expect_refusal(options, "is in use by another pcached cache");
    cache->abandon();
  }
}
