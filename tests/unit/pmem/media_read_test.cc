#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <vector>

#include "pcached/pmem_writer.h"
#include "pmem/badblocks.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;

TEST_CASE("a read that faults under the mapping fails with EIO and the process lives", "[pmem][media]") {
  EmulatedPmem pmem(16 * MiB);
  const Region& region = *pmem.region;
  std::vector<char> data(8192, 'x');
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(region, policy);
  writer.copy_persist(0, data.data(), data.size());
  writer.copy_persist(12 * MiB, data.data(), data.size());

  // Shrinking the file under the mapping makes every page past the new end raise SIGBUS.
  pmem.file.resize(8 * MiB);
  std::vector<char> buffer(8192, 0);
  const Status failed = region.read(12 * MiB, buffer.data(), buffer.size());
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.code() == EIO);
  CHECK(failed.message().find("media error at offset " + std::to_string(12 * MiB)) != std::string::npos);
  CHECK(region.media_errors() == 1);
  // The faulting page is remembered: the next read there fails without touching the media.
  CHECK(region.overlaps_bad_range(12 * MiB, 1));
  CHECK(region.bad_ranges() == std::vector<BadRange>{{12 * MiB, 4096}});
  const Status again = region.read(12 * MiB, buffer.data(), 512);
  CHECK(again.code() == EIO);
  CHECK(again.message().find("known bad block") != std::string::npos);

  // Healthy pages still read.
  REQUIRE(region.read(0, buffer.data(), buffer.size()).ok());
  CHECK(std::memcmp(buffer.data(), data.data(), data.size()) == 0);
}

TEST_CASE("a read of a known bad range fails without touching the media", "[pmem][media]") {
  EmulatedPmem pmem(16 * MiB);
  const Region& region = *pmem.region;
  region.mark_bad(1 * MiB, 4096);
  std::vector<char> buffer(512, 's');
  const Status failed = region.read(1 * MiB + 4000, buffer.data(), 512);  // straddles the end of the range
  CHECK(failed.code() == EIO);
  CHECK(failed.message().find("known bad block") != std::string::npos);
  CHECK(std::all_of(buffer.begin(), buffer.end(), [](char c) { return c == 's'; }));  // nothing copied
  CHECK(region.media_errors() == 1);
  CHECK(region.read(1 * MiB + 4096, buffer.data(), 512).ok());
  CHECK(region.read(1 * MiB - 512, buffer.data(), 512).ok());
}

TEST_CASE("a read outside the region is refused", "[pmem][media][bad-input]") {
  EmulatedPmem pmem(16 * MiB);
  char buffer[16];
  CHECK(pmem.region->read(16 * MiB - 8, buffer, 16).code() == EINVAL);
  CHECK(pmem.region->read(UINT64_MAX, buffer, 1).code() == EINVAL);
}

TEST_CASE("a SIGBUS outside a guarded read still ends the process", "[pmem][media]") {
  EmulatedPmem pmem(16 * MiB);
  char buffer[16];
  REQUIRE(pmem.region->read(0, buffer, sizeof buffer).ok());  // the handler is installed now
  pmem.file.resize(4 * MiB);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    volatile std::byte sink = pmem.region->base()[8 * MiB];  // unguarded load: must not be swallowed
    (void)sink;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}

TEST_CASE("bad ranges are kept sorted and merged", "[pmem][media]") {
  std::vector<BadRange> ranges;
  add_bad_range(ranges, {100, 10});
  add_bad_range(ranges, {50, 10});
  add_bad_range(ranges, {200, 0});  // empty: ignored
  CHECK(ranges == std::vector<BadRange>{{50, 10}, {100, 10}});
  add_bad_range(ranges, {55, 50});  // bridges both
  CHECK(ranges == std::vector<BadRange>{{50, 60}});
  add_bad_range(ranges, {110, 5});  // touches the end
  CHECK(ranges == std::vector<BadRange>{{50, 65}});
  add_bad_range(ranges, {0, 10});
  add_bad_range(ranges, {300, 10});
  add_bad_range(ranges, {5, 400});  // swallows everything
  CHECK(ranges == std::vector<BadRange>{{0, 405}});
}
