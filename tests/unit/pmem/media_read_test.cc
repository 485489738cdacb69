#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <csignal>
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
  sigset_t mask_before, mask_after;
  REQUIRE(::pthread_sigmask(SIG_BLOCK, nullptr, &mask_before) == 0);
  const Status failed = region.read(12 * MiB, buffer.data(), buffer.size());
  REQUIRE_FALSE(failed.ok());
  // The thread's signal mask is what it was: leaving the handler by a jump blocks nothing (under
  // ThreadSanitizer it blocked every signal, and the next fault killed the process).
  REQUIRE(::pthread_sigmask(SIG_BLOCK, nullptr, &mask_after) == 0);
  for (int signo = 1; signo < SIGRTMIN; ++signo) {
    INFO("signal " << signo);
    CHECK(sigismember(&mask_after, signo) == sigismember(&mask_before, signo));
  }
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

TEST_CASE("a copy within the region reads its source like a read: a media error fails the copy, not the process",
          "[pmem][media][writer]") {
  EmulatedPmem pmem(16 * MiB);
  const Region& region = *pmem.region;
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(region, policy);
  std::vector<char> data(3 * 4096 + 512);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  writer.copy_persist(1 * MiB, data.data(), data.size());
  writer.copy_persist(12 * MiB, data.data(), data.size());

  // Healthy source: the bytes arrive, and nothing around them changes.
  std::memset(region.base() + 2 * MiB - 64, 'g', data.size() + 128);
  REQUIRE(writer.copy_within_nodrain(2 * MiB, 1 * MiB, data.size()).ok());
  writer.drain();
  CHECK(std::memcmp(region.base() + 2 * MiB, data.data(), data.size()) == 0);
  CHECK(std::all_of(region.base() + 2 * MiB - 64, region.base() + 2 * MiB, [](std::byte b) { return b == std::byte{'g'}; }));
  CHECK(region.base()[2 * MiB + data.size()] == std::byte{'g'});

  // A known bad block in the source: EIO, and the destination is not touched.
  region.mark_bad(1 * MiB + 4096, 4096);
  std::memset(region.base() + 3 * MiB, 'd', data.size());
  const Status known = writer.copy_within_nodrain(3 * MiB, 1 * MiB, data.size());
  CHECK(known.code() == EIO);
  CHECK(std::all_of(region.base() + 3 * MiB, region.base() + 3 * MiB + data.size(), [](std::byte b) { return b == std::byte{'d'}; }));

  // A source page that faults (the file shrunk under it): EIO, the page is remembered as bad.
  pmem.file.resize(12 * MiB + 4096);
  const Status faulted = writer.copy_within_nodrain(4 * MiB, 12 * MiB, data.size());
  CHECK(faulted.code() == EIO);
  CHECK(faulted.message().find("media error at offset " + std::to_string(12 * MiB + 4096)) != std::string::npos);
  CHECK(region.overlaps_bad_range(12 * MiB + 4096, 1));
  // (What reached the destination before the fault is unspecified.) The rest of the region still
  // copies.
  REQUIRE(writer.copy_within_nodrain(5 * MiB, 2 * MiB, data.size()).ok());
  CHECK(std::memcmp(region.base() + 5 * MiB, data.data(), data.size()) == 0);
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
