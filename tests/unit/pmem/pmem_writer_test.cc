#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;

namespace {

constexpr std::byte kGuard{0xA5};

std::vector<CopyMethod> supported_methods() {
  std::vector<CopyMethod> methods;
  for (CopyMethod method : kAllCopyMethods) {
    if (cpu_features().supports(method)) methods.push_back(method);
  }
  return methods;
}

std::vector<std::byte> random_bytes(size_t len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> bytes(len);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  return bytes;
}

bool all_equal(const std::byte* begin, size_t len, std::byte value) {
  // Every byte equals the first one iff the range equals itself shifted by one: one memcmp, which
  // keeps this fast in the sanitizer builds too.
  return len == 0 || (begin[0] == value && std::memcmp(begin, begin + 1, len - 1) == 0);
}

}  // namespace

TEST_CASE("every copy method writes exactly the bytes asked, at odd sizes and alignments", "[pmem][writer]") {
  EmulatedPmem pmem(16 * MiB);
  const Region& region = *pmem.region;
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(region, policy);
  constexpr uint64_t kBase = 1 * MiB;  // a guard band of this size on each side
  const std::vector<size_t> sizes = {1, 7, 63, 64, 65, 511, 512, 513, 4095, 4097, 65537, 1 * MiB + 3};
  const std::vector<uint64_t> misalignments = {0, 1, 8, 63, 64, 4095};

  uint64_t seed = 1;
  for (CopyMethod method : supported_methods()) {
    for (size_t len : sizes) {
      for (uint64_t misalignment : misalignments) {
        INFO("method " << to_string(method) << " len " << len << " misalignment " << misalignment);
        std::memset(region.base(), static_cast<int>(kGuard), 4 * MiB);
        const std::vector<std::byte> data = random_bytes(len, seed++);
        const uint64_t offset = kBase + misalignment;
        writer.copy_nodrain(offset, data.data(), len, method);
        writer.drain();
        REQUIRE(std::memcmp(region.base() + offset, data.data(), len) == 0);
        REQUIRE(all_equal(region.base(), offset, kGuard));
        REQUIRE(all_equal(region.base() + offset + len, 4 * MiB - offset - len, kGuard));
      }
    }
  }
}

TEST_CASE("fill writes exactly the range with every policy", "[pmem][writer]") {
  EmulatedPmem pmem(16 * MiB);
  const Region& region = *pmem.region;
  for (CopyMethod method : supported_methods()) {
    PolicyTable table;
    table.fill(method);
    CopyPolicy policy(table, "test");
    PmemWriter writer(region, policy);
    for (size_t len : {size_t{3}, size_t{100}, size_t{4096}, size_t{70000}}) {
      INFO("method " << to_string(method) << " len " << len);
      std::memset(region.base(), static_cast<int>(kGuard), 1 * MiB);
      writer.fill_nodrain(1001, 0x3C, len);
      writer.drain();
      REQUIRE(all_equal(region.base() + 1001, len, std::byte{0x3C}));
      REQUIRE(all_equal(region.base(), 1001, kGuard));
      REQUIRE(all_equal(region.base() + 1001 + len, 1 * MiB - 1001 - len, kGuard));
    }
  }
}

TEST_CASE("the writer uses the policy's method for each size class and counts it", "[pmem][writer]") {
  EmulatedPmem pmem(16 * MiB);
  const std::vector<CopyMethod> methods = supported_methods();
  REQUIRE(methods.size() >= 2);
  PolicyTable table;
  table.fill(methods[0]);
  table[size_class_of(4096)] = methods[1];
  CopyPolicy policy(table, "test");
  PmemWriter writer(*pmem.region, policy);
  const std::vector<std::byte> data = random_bytes(8192, 7);

  writer.copy_nodrain(0, data.data(), 512);
  writer.copy_nodrain(8192, data.data(), 4096);
  writer.copy_nodrain(16384, data.data(), 6000);  // still the 4 KiB class
  writer.drain();

  const CopyCounters& counters = writer.counters();
  const auto m0 = static_cast<size_t>(methods[0]);
  const auto m1 = static_cast<size_t>(methods[1]);
  CHECK(counters.copies[m0][size_class_of(512)] == 1);
  CHECK(counters.copies[m1][size_class_of(4096)] == 2);
  CHECK(counters.bytes[m1][size_class_of(4096)] == 4096 + 6000);
  CHECK(counters.copies[m0][size_class_of(4096)] == 0);
  CHECK(counters.fences == 1);
}

TEST_CASE("a policy replaced at run time takes effect for the next copy", "[pmem][writer]") {
  EmulatedPmem pmem(16 * MiB);
  const std::vector<CopyMethod> methods = supported_methods();
  REQUIRE(methods.size() >= 2);
  PolicyTable first;
  first.fill(methods[0]);
  PolicyTable second;
  second.fill(methods[1]);
  CopyPolicy policy(first, "first");
  PmemWriter writer(*pmem.region, policy);
  const std::vector<std::byte> data = random_bytes(4096, 9);
  writer.copy_persist(0, data.data(), 4096);
  policy.replace(second, "second");
  writer.copy_persist(4096, data.data(), 4096);
  CHECK(policy.origin() == "second");
  CHECK(policy.table() == second);
  CHECK(writer.counters().copies[static_cast<size_t>(methods[0])][size_class_of(4096)] == 1);
  CHECK(writer.counters().copies[static_cast<size_t>(methods[1])][size_class_of(4096)] == 1);
}

TEST_CASE("a volatile region persists through msync and keeps the bytes", "[pmem][writer]") {
  pcached::testing::ForcedGranularity none(nullptr);
  pcached::testing::ScratchFile file(16 * MiB);
  RegionOptions options;
  options.path = file.path();
  options.allow_volatile = true;
  auto region = Region::open(options);
  REQUIRE(region.ok());
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(*region.value(), policy);
  const std::vector<std::byte> data = random_bytes(10000, 11);
  writer.copy_persist(12345, data.data(), data.size());
  std::vector<std::byte> back(data.size());
  REQUIRE(region.value()->read(12345, back.data(), back.size()).ok());
  CHECK(back == data);
}
