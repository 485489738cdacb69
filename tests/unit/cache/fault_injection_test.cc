// A backing device that fails: writeback retries with backoff and keeps dirty data; reads of
// cached data go on; read misses fail with EIO; everything resumes when the fault clears.
#include <catch2/catch.hpp>

#include "backing/backing_device.h"
#include "format/layout.h"
#include "support/cache_fixture.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 16 * MiB;

}  // namespace

TEST_CASE("failed writeback keeps dirty data, retries, and resumes when the device recovers", "[cache][faults]") {
  auto mode = GENERATE(as<std::string>{}, "eio", "short", "flush");
  INFO(mode);
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  backing::FaultInjection& faults = cache->backing_faults();
  if (mode == "eio") faults.writes.count = -1;
  if (mode == "short") {
    faults.writes.short_io = true;
    faults.writes.count = -1;
  }
  if (mode == "flush") faults.flushes.count = -1;
  auto queue = make_queue(*cache);
  for (uint64_t i = 0; i < 32; ++i) {
    const auto data = pattern(i + 1, i * 16, 16);
    REQUIRE(queue->write(i * 16, 16, data.data()) == 16 * 512);
  }
  const Status flushed = cache->flush_all();
  CHECK_FALSE(flushed.ok());
  CHECK(flushed.message().find("keeps failing") != std::string::npos);
  cache::CacheStats stats = cache->stats();
  CHECK(stats.writeback_errors > 0);
  CHECK(stats.writeback_stalled);
  CHECK(stats.dirty_bytes == 32 * 16 * 512);
  // Cached data is still served while the device is down.
  std::vector<std::byte> buffer(16 * kSector);
  REQUIRE(queue->read(5 * 16, 16, buffer.data()) == 16 * 512);
  CHECK(decode_sector(buffer.data(), 5 * 16) == 6);

  faults.writes.count = 0;
  faults.writes.short_io = false;
  faults.flushes.count = 0;
  REQUIRE(cache->flush_all().ok());
  stats = cache->stats();
  CHECK(stats.dirty_bytes == 0);
  CHECK_FALSE(stats.writeback_stalled);
  queue.reset();
  REQUIRE(cache->detach(false).ok());
  const auto backing = read_file(files.backing.path());
  for (uint64_t sector = 0; sector < 32 * 16; ++sector) REQUIRE(decode_sector(backing.data() + sector * kSector, sector) == sector / 16 + 1);
}

TEST_CASE("a read miss on a failing device fails with EIO; hits keep working", "[cache][faults]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  const auto data = pattern(1, 0, 8);
  REQUIRE(queue->write(0, 8, data.data()) == 8 * 512);
  cache->backing_faults().reads.count = -1;
  std::vector<std::byte> buffer(16 * kSector);
  CHECK(queue->read(100, 8, buffer.data()) == -EIO);
  CHECK(queue->read(0, 16, buffer.data()) == -EIO);  // partly cached, partly not
  REQUIRE(queue->read(0, 8, buffer.data()) == 8 * 512);
  CHECK(decode_sector(buffer.data(), 0) == 1);
  CHECK(cache->stats().backing_read_errors == 2);
  cache->backing_faults().reads.count = 0;
  REQUIRE(queue->read(100, 8, buffer.data()) == 8 * 512);
}

TEST_CASE("a full cache makes writers wait for writeback, never fail", "[cache][faults]") {
  CacheFiles files(kRegionBytes, 64 * MiB);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  // Three times the cache's capacity of writes, all of them acknowledged.
  const uint64_t sectors = 3 * 12 * MiB / 512;
  for (uint64_t sector = 0; sector < sectors; sector += 128) {
    const auto data = pattern(sector / 128 + 1, sector, 128);
    REQUIRE(queue->write(sector, 128, data.data()) == 128 * 512);
  }
  std::vector<std::byte> buffer(128 * kSector);
  for (uint64_t sector = 0; sector < sectors; sector += 128) {
    REQUIRE(queue->read(sector, 128, buffer.data()) == 128 * 512);
    for (uint32_t s = 0; s < 128; s += 37) REQUIRE(decode_sector(buffer.data() + s * kSector, sector + s) == sector / 128 + 1);
  }
  CHECK(cache->stats().segments_reclaimed > 0);
}
