#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"
#include "pmem/persistence_simulator.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;

namespace {

constexpr uint64_t kLine = kCacheLine;

bool line_is(const std::vector<std::byte>& image, uint64_t line, std::byte value) {
  for (uint64_t i = 0; i < kLine; ++i) {
    if (image[line * kLine + i] != value) return false;
  }
  return true;
}

PolicyTable all(CopyMethod method) {
  PolicyTable table;
  table.fill(method);
  return table;
}

// An observer that only forwards what the test tells it, to script stores and flushes that a real
// writer would never leave half done.
struct Scripted {
  explicit Scripted(const Region& region) : region(region), simulator(region) {}
  void cached_store(uint64_t line, std::byte value) {
    std::memset(region.base() + line * kLine, static_cast<int>(value), kLine);
    simulator.on_store(line * kLine, kLine, StoreKind::Cached);
  }
  void nt_store(uint64_t line, std::byte value) {
    std::memset(region.base() + line * kLine, static_cast<int>(value), kLine);
    simulator.on_store(line * kLine, kLine, StoreKind::NonTemporal);
  }
  void flush(uint64_t line) { simulator.on_flush(line * kLine, kLine); }
  void fence() { simulator.on_fence(); }
  const Region& region;
  PersistenceSimulator simulator;
};

}  // namespace

TEST_CASE("a power cut drops exactly the lines that were not flushed and fenced", "[pmem][simulator]") {
  EmulatedPmem pmem(16 * MiB);
  Scripted s(*pmem.region);
  const std::byte kOld{0}, kNew{0x77};
  s.cached_store(1, kNew);  // stored, flushed, fenced: durable
  s.flush(1);
  s.cached_store(2, kNew);  // stored only: lost
  s.cached_store(3, kNew);  // flushed, no fence yet
  s.flush(3);
  s.nt_store(4, kNew);  // streaming store, fenced below: durable
  s.fence();
  s.cached_store(6, kNew);  // flushed, then stored again before the fence: the flushed value is durable
  s.flush(6);
  s.fence();
  s.cached_store(6, std::byte{0x99});
  s.nt_store(5, kNew);  // streaming store after the last fence: lost
  s.cached_store(7, kNew);
  s.flush(7);

  const auto image = s.simulator.image_after_power_cut({});
  CHECK(line_is(image, 0, kOld));
  CHECK(line_is(image, 1, kNew));
  CHECK(line_is(image, 2, kOld));
  CHECK(line_is(image, 3, kNew));  // the fence after line 4 covered line 3's flush too
  CHECK(line_is(image, 4, kNew));
  CHECK(line_is(image, 5, kOld));
  CHECK(line_is(image, 6, kNew));
  CHECK(line_is(image, 7, kOld));
  CHECK(s.simulator.unpersisted_lines() == 4);  // 2, 5, 6 (re-dirtied) and 7

  const auto everything = s.simulator.image_after_power_cut({.keep_unpersisted = 1.0});
  CHECK(line_is(everything, 5, kNew));
  CHECK(line_is(everything, 6, std::byte{0x99}));
  CHECK(line_is(everything, 7, kNew));
  CHECK(line_is(everything, 2, kNew));
}

TEST_CASE("a fence makes durable only the flushes of its own thread", "[pmem][simulator]") {
  EmulatedPmem pmem(16 * MiB);
  Scripted s(*pmem.region);
  std::thread other([&] {
    s.cached_store(10, std::byte{1});
    s.flush(10);
  });
  other.join();
  s.fence();  // this thread's fence
  CHECK(line_is(s.simulator.image_after_power_cut({}), 10, std::byte{0}));
  std::thread fencer([&] {
    s.cached_store(11, std::byte{2});
    s.flush(11);
    s.fence();
  });
  fencer.join();
  CHECK(line_is(s.simulator.image_after_power_cut({}), 11, std::byte{2}));
}

TEST_CASE("random keeping only ever adds unpersisted lines, and torn lines mix 8-byte words", "[pmem][simulator]") {
  EmulatedPmem pmem(16 * MiB);
  Scripted s(*pmem.region);
  for (uint64_t line = 0; line < 64; ++line) {
    s.cached_store(line, std::byte{0x11});
    if (line % 2 == 0) s.flush(line);
  }
  s.fence();  // even lines durable
  for (uint64_t line = 64; line < 1064; ++line) s.cached_store(line, std::byte{0xEE});

  size_t kept = 0, torn = 0;
  const auto image = s.simulator.image_after_power_cut({.keep_unpersisted = 0.5, .tear_words = true, .seed = 42});
  for (uint64_t line = 0; line < 64; line += 2) CHECK(line_is(image, line, std::byte{0x11}));
  for (uint64_t line = 64; line < 1064; ++line) {
    size_t new_words = 0;
    for (uint64_t word = 0; word < kLine; word += 8) {
      const std::byte* w = image.data() + line * kLine + word;
      const bool is_new = std::all_of(w, w + 8, [](std::byte b) { return b == std::byte{0xEE}; });
      const bool is_old = std::all_of(w, w + 8, [](std::byte b) { return b == std::byte{0}; });
      REQUIRE((is_new || is_old));  // never a half-written word
      new_words += is_new;
    }
    if (new_words > 0) ++kept;
    if (new_words > 0 && new_words < kLine / 8) ++torn;
  }
  // 1000 lines kept with p = 0.5, words torn with p = 0.5: both far from 0 and from all.
  CHECK(kept > 300);
  CHECK(kept < 700);
  CHECK(torn > 100);
  // Lines that were never stored are never touched.
  CHECK(line_is(image, 2000, std::byte{0}));
}

TEST_CASE("the simulator follows a real writer through every copy method", "[pmem][simulator]") {
  for (const char* granularity : {"CACHE_LINE", "BYTE"}) {
  EmulatedPmem pmem(16 * MiB, granularity);
  for (CopyMethod method : kAllCopyMethods) {
    if (!usable_on(*pmem.region, method)) continue;
    INFO(granularity << " " << to_string(method));
    PersistenceSimulator simulator(*pmem.region);
    CopyPolicy policy(all(method), "test");
    PmemWriter writer(*pmem.region, policy, &simulator);
    std::vector<std::byte> data(10000, std::byte{0x5A});
    writer.copy_nodrain(4096 + 3, data.data(), data.size());
    auto before_fence = simulator.image_after_power_cut({});
    CHECK(std::memcmp(before_fence.data() + 4096 + 3, data.data(), data.size()) != 0);
    writer.drain();
    auto after_fence = simulator.image_after_power_cut({});
    CHECK(std::memcmp(after_fence.data() + 4096 + 3, data.data(), data.size()) == 0);
    CHECK(simulator.unpersisted_lines() == 0);
    std::memset(pmem.region->base(), 0, 1 * MiB);
  }
  }
}

TEST_CASE("on eADR a cached store needs no flush, but still the fence", "[pmem][simulator][eadr]") {
  EmulatedPmem pmem(16 * MiB, "BYTE");
  REQUIRE(pmem.region->granularity() == Granularity::Byte);
  Scripted s(*pmem.region);
  const std::byte kNew{0x42};
  s.cached_store(1, kNew);
  CHECK(line_is(s.simulator.image_after_power_cut({}), 1, std::byte{0}));  // still in the store buffer
  s.fence();
  CHECK(line_is(s.simulator.image_after_power_cut({}), 1, kNew));

  // A real writer: the cached method issues no flush at all, and persist() none either.
  struct Counting final : PersistObserver {
    unsigned flushes = 0;
    void on_store(uint64_t, size_t, StoreKind) override {}
    void on_flush(uint64_t, size_t) override { ++flushes; }
    void on_fence() override {}
  } counting;
  CopyPolicy policy(all(CopyMethod::Cached), "test");
  PmemWriter writer(*pmem.region, policy, &counting);
  std::vector<std::byte> data(4096, kNew);
  writer.copy_nodrain(8192, data.data(), data.size());
  writer.persist(0, 4096);
  CHECK(counting.flushes == 0);
  CHECK(writer.counters().copies[static_cast<size_t>(CopyMethod::Cached)][size_class_of(4096)] == 1);
}
