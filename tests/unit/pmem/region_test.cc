#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "pcached/pmem_region.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::ForcedGranularity;
using pcached::testing::ScratchFile;

namespace {

Result<std::unique_ptr<Region>> open_region(const std::string& path, bool allow_volatile = false,
                                            uint64_t min_size = kDefaultMinRegionSize) {
  RegionOptions options;
  options.path = path;
  options.allow_volatile = allow_volatile;
  options.min_size = min_size;
  return Region::open(options);
}

// Every refusal is one line that names the path and says why.
void check_refusal(const Result<std::unique_ptr<Region>>& result, const std::string& path, const std::string& reason) {
  REQUIRE_FALSE(result.ok());
  const std::string& message = result.status().message();
  INFO(message);
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find(reason) != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("a plain file is page granularity and is refused unless volatile is allowed", "[pmem][region]") {
  ForcedGranularity none(nullptr);
  ScratchFile file(16 * MiB);
  auto refused = open_region(file.path());
  check_refusal(refused, file.path(), "page granularity");
  CHECK(refused.status().code() == ENOTSUP);

  auto allowed = open_region(file.path(), /*allow_volatile=*/true);
  REQUIRE(allowed.ok());
  CHECK(allowed.value()->granularity() == Granularity::Page);
  CHECK(allowed.value()->is_volatile());
}

TEST_CASE("forced cache-line and byte granularity are reported as such", "[pmem][region]") {
  ScratchFile file(16 * MiB);
  {
    ForcedGranularity cache_line("CACHE_LINE");
    auto region = open_region(file.path());
    REQUIRE(region.ok());
    CHECK(region.value()->granularity() == Granularity::CacheLine);
    CHECK_FALSE(region.value()->is_volatile());
  }
  {
    ForcedGranularity byte("BYTE");
    auto region = open_region(file.path());
    REQUIRE(region.ok());
    CHECK(region.value()->granularity() == Granularity::Byte);
  }
}

TEST_CASE("an opened region reports its size, identity and mapping", "[pmem][region]") {
  ForcedGranularity cache_line("CACHE_LINE");
  ScratchFile file(32 * MiB);
  auto region = open_region(file.path());
  REQUIRE(region.ok());
  struct stat st {};
  REQUIRE(::stat(file.path().c_str(), &st) == 0);
  const Region& r = *region.value();
  CHECK(r.size() == 32 * MiB);
  CHECK(r.base() != nullptr);
  CHECK(r.alignment() >= 4096);
  CHECK(r.identity().kind == RegionKind::File);
  CHECK(r.identity().inode == st.st_ino);
  CHECK(r.identity().device == st.st_dev);
  CHECK(r.identity().path == file.path());
  CHECK(r.bad_ranges().empty());
}

TEST_CASE("bad input is refused with a one-line reason naming the path", "[pmem][region][bad-input]") {
  ForcedGranularity cache_line("CACHE_LINE");

  SECTION("a path that does not exist") {
    check_refusal(open_region("/dev/shm/pcached-no-such-region"), "/dev/shm/pcached-no-such-region",
                  "No such file or directory");
  }
  SECTION("a directory") {
    auto result = open_region("/dev/shm");
    check_refusal(result, "/dev/shm", "is a directory");
    CHECK(result.status().code() == EISDIR);
  }
  SECTION("a region smaller than the minimum") {
    ScratchFile file(8 * MiB);
    auto result = open_region(file.path());
    check_refusal(result, file.path(), "is 8 MiB; a pmem region must be at least 16 MiB");
    CHECK(result.status().code() == ENOSPC);
  }
  SECTION("an empty file") {
    ScratchFile file(0);
    check_refusal(open_region(file.path()), file.path(), "is 0 B");
  }
  SECTION("a size that is not a multiple of the page size") {
    ScratchFile file(16 * MiB + 100);
    check_refusal(open_region(file.path()), file.path(), "not a multiple of the region's alignment");
  }
  SECTION("a read-only file") {
    ScratchFile file(16 * MiB);
    REQUIRE(::chmod(file.path().c_str(), 0444) == 0);
    auto result = open_region(file.path());
    check_refusal(result, file.path(), "is read-only (mode 0444)");
    CHECK(result.status().code() == EROFS);
  }
  SECTION("a file on a filesystem without DAX") {
    ForcedGranularity none(nullptr);
    ScratchFile file(16 * MiB);
    check_refusal(open_region(file.path()), file.path(), "is not DAX-capable persistent memory");
  }
  SECTION("a block device node") {
    const std::string node = "/dev/shm/pcached-test-blockdev-" + std::to_string(::getpid());
    REQUIRE(::mknod(node.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0);
    auto result = open_region(node);
    ::unlink(node.c_str());
    check_refusal(result, node, "is a block device");
  }
  SECTION("a character device that is not devdax") {
    check_refusal(open_region("/dev/null"), "/dev/null", "not a devdax device");
  }
  SECTION("no path at all") {
    auto result = open_region("");
    REQUIRE_FALSE(result.ok());
    CHECK(result.status().message() == "pmem region: no path given");
  }
}
