// Early memory-failure reports (BUS_MCEERR_AO), sent by the test to itself: they take the same
// path through the handler as the kernel's; tests/vm/guest_memory_failure.sh has the kernel send
// them, from a real memory failure on a devdax page.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <vector>

#include "pmem/memory_failure.h"
#include "support/eventually.h"
#include "support/memory_failure_report.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;
using pcached::testing::eventually;
using pcached::testing::report_memory_failure_to_self;


TEST_CASE("an early memory-failure report marks the page bad in the region that maps it", "[pmem][media]") {
  EmulatedPmem pmem(16 * MiB);
  EmulatedPmem other(16 * MiB);
  auto monitor = MemoryFailureMonitor::start();
  REQUIRE(monitor.ok());
  std::vector<char> buffer(4096);
  REQUIRE(pmem.region->read(5 * MiB, buffer.data(), buffer.size()).ok());

  REQUIRE(report_memory_failure_to_self(pmem.region->base() + 5 * MiB + 100));
  REQUIRE(eventually([&] { return monitor.value()->pmem_reports() == 1; }));
  CHECK(pmem.region->bad_ranges() == std::vector<BadRange>{{5 * MiB, 4096}});
  CHECK(pmem.region->media_errors() == 1);
  CHECK(other.region->bad_ranges().empty());
  // Nothing reads the page again, though the media still could: its data is not trusted.
  const Status read = pmem.region->read(5 * MiB + 512, buffer.data(), 512);
  CHECK(read.code() == EIO);
  CHECK(pmem.region->read(5 * MiB + 4096, buffer.data(), buffer.size()).ok());

  // From a mapping in 2 MiB pages, the kernel reports the whole 2 MiB: all of it is bad.
  REQUIRE(report_memory_failure_to_self(pmem.region->base() + 8 * MiB + 3 * 4096, 21));
  REQUIRE(eventually([&] { return monitor.value()->pmem_reports() == 2; }));
  CHECK(pmem.region->bad_ranges() == std::vector<BadRange>{{5 * MiB, 4096}, {8 * MiB, 2 * MiB}});
  CHECK(pmem.region->read(9 * MiB, buffer.data(), 512).code() == EIO);

  // Many at once, faster than the monitor takes them: none is lost.
  for (int page = 0; page < 32; ++page) REQUIRE(report_memory_failure_to_self(other.region->base() + page * 2 * 4096));
  REQUIRE(eventually([&] { return monitor.value()->pmem_reports() == 34; }));
  CHECK(other.region->bad_ranges().size() == 32);
  CHECK(monitor.value()->other_reports() == 0);
}

TEST_CASE("an early report outside every pmem region is logged, and the process lives", "[pmem][media]") {
  auto monitor = MemoryFailureMonitor::start();
  REQUIRE(monitor.ok());
  std::vector<char> heap(8192);
  REQUIRE(report_memory_failure_to_self(heap.data()));
  REQUIRE(eventually([&] { return monitor.value()->other_reports() == 1; }));
  CHECK(monitor.value()->pmem_reports() == 0);
}

TEST_CASE("a region that is gone no longer takes reports", "[pmem][media]") {
  auto monitor = MemoryFailureMonitor::start();
  REQUIRE(monitor.ok());
  const std::byte* address = nullptr;
  {
    EmulatedPmem pmem(16 * MiB);
    address = pmem.region->base() + 4096;
  }
  REQUIRE(report_memory_failure_to_self(address));
  REQUIRE(eventually([&] { return monitor.value()->other_reports() == 1; }));
}

TEST_CASE("one memory-failure monitor at a time", "[pmem][media]") {
  auto first = MemoryFailureMonitor::start();
  REQUIRE(first.ok());
  auto second = MemoryFailureMonitor::start();
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == EBUSY);
  first.value().reset();
  CHECK(MemoryFailureMonitor::start().ok());
}

TEST_CASE("without a monitor an early report keeps its default meaning", "[pmem][media]") {
  EmulatedPmem pmem(16 * MiB);
  char buffer[16];
  REQUIRE(pmem.region->read(0, buffer, sizeof buffer).ok());  // the handler is installed now
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    report_memory_failure_to_self(pmem.region->base());
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}
