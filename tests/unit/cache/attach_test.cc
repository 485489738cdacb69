// Attaching and formatting: what is refused, with which message, and that refusing writes nothing.

#include <catch2/catch.hpp>
#include <random>

#include "format/control_area.h"
#include "format/crc32c.h"
#include "format/endian.h"
#include "format/key_set.h"
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

// Writes sb, re-encoded, over the given superblock copies of the region.
void write_superblock(const std::string& region_path, const format::Superblock& sb, std::initializer_list<unsigned> copies) {
  std::array<std::byte, format::kSuperblockSize> encoded;
  format::encode_superblock(sb, encoded);
  for (unsigned copy : copies) write_file_at(region_path, format::kSuperblockOffsets[copy], encoded);
}

// Rewrites what this version wrote as version 1 wrote it: control slots saying version 1, the key
// sets of every journal as kind 1 (no digest; bytes 24-31 zero).
// Returns the number of key sets rewritten.
unsigned make_version_1(const std::string& region_path) {
  using format::load_le;
  using format::store_le;
  auto region = read_file(region_path);
  const format::Superblock sb = read_superblock(region_path);
  const uint32_t salt = sb.salt();
  for (uint64_t offset : format::kControlOffsets) {
    std::byte* at = region.data() + offset;
    store_le<uint32_t>(at + 8, 1);
    store_le<uint32_t>(at + 4, format::crc32c_skipping_field(salt, at, format::kControlSize, 4));
  }
  Result<format::ControlArea> slots[2] = {Status::error(EIO, ""), Status::error(EIO, "")};
  for (unsigned slot = 0; slot < 2; ++slot) {
    slots[slot] = format::decode_control_area(
        std::span<const std::byte, format::kControlSlotBytes>(region.data() + format::kControlOffsets[slot], format::kControlSlotBytes),
        salt);
  }
  const auto current = format::pick_current_control(slots[0], slots[1]);
  REQUIRE(current.ok());
  unsigned rewritten = 0;
  for (const format::JournalHead& head : current->control.journals) {
    if (!head.in_use()) continue;
    const uint64_t segment = sb.segment_offset(head.segment);
    for (uint64_t offset = format::kSegmentHeaderSize; offset + format::kKeySetHeaderSize <= sb.segment_size;) {
      std::byte* record = region.data() + segment + offset;
      if (load_le<uint32_t>(record) != format::kKeySetMagic) break;
      const uint16_t count = load_le<uint16_t>(record + 12);
      REQUIRE(load_le<uint16_t>(record + 14) == static_cast<uint16_t>(format::KeySetKind::HashedKeys));
      store_le<uint16_t>(record + 14, static_cast<uint16_t>(format::KeySetKind::Keys));
      store_le<uint64_t>(record + 24, 0);
      store_le<uint32_t>(record + 4, format::crc32c_skipping_field(salt, record, format::kKeySetHeaderSize +
                                                                               count * format::kKeySize, 4));
      offset += format::encoded_key_set_size(count);
      ++rewritten;
    }
  }
  write_file(region_path, region);
  return rewritten;
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
  write_file_at(files.region.path(), 0, foreign);
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
  format::Superblock sb = read_superblock(files.region.path());
  sb.version = format::kFormatVersion + 1;
  write_superblock(files.region.path(), sb, {0, 1});
  const auto before = read_file(files.region.path());
  expect_refusal(maybe_calibrating(files.options(), GENERATE(false, true)),
                 "was written by a newer pcached; this build reads version " + std::to_string(format::kFormatVersion) +
                     "; upgrade pcached");
  CHECK((read_file(files.region.path()) == before));  // parenthesised: no dump of both images
}

TEST_CASE("a cache of format version 1 is upgraded when attached, also after an upgrade cut short",
          "[cache][attach][upgrade]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  {
    auto cache = open_cache(hold_writeback(files.options(true)));  // the keys stay in the journal
    auto queue = make_queue(*cache);
    for (uint64_t id = 1; id <= 3; ++id) {
      const auto data = pattern(id, 64 * id, 8);
      REQUIRE(queue->write(64 * id, 8, data.data()) == 8 * 512);
    }
    queue.reset();
    cache->abandon();  // dirty, not written back
  }
  REQUIRE(make_version_1(files.region.path()) == 3);
  format::Superblock sb = read_superblock(files.region.path());
  REQUIRE(sb.version == format::kFormatVersion);
  sb.version = 1;
  // Both copies at version 1; or copy 0 upgraded and copy 1 not yet (a crash between the two).
  const bool cut_short = GENERATE(false, true);
  INFO((cut_short ? "upgrade cut short" : "version 1"));
  write_superblock(files.region.path(), sb, cut_short ? std::initializer_list<unsigned>{1} : std::initializer_list<unsigned>{0, 1});
  {
    auto cache = open_cache(files.options());
    auto queue = make_queue(*cache);
    std::vector<std::byte> buffer(8 * kSector);
    for (uint64_t id = 1; id <= 3; ++id) {
      REQUIRE(queue->read(64 * id, 8, buffer.data()) == 8 * 512);
      for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 64 * id + i) == id);
    }
    // Upgraded before anything else was written: both copies say the current version, as a
    // fresh cache.
    CHECK(read_superblock(files.region.path(), 0).version == format::kFormatVersion);
    CHECK(read_superblock(files.region.path(), 1).version == format::kFormatVersion);
    queue.reset();
    REQUIRE(cache->detach(false).ok());  // written back: version 1 key sets and the new ones alike
  }
  const auto backing = read_file(files.backing.path());
  for (uint64_t id = 1; id <= 3; ++id) {
    for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(backing.data() + (64 * id + i) * kSector, 64 * id + i) == id);
  }
  // A copy that differs in more than flags and version is still a disagreement.
  sb = read_superblock(files.region.path());
  sb.created_unix += 1;
  write_superblock(files.region.path(), sb, {1});
  expect_refusal(files.options(), "the two superblock copies disagree");
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
