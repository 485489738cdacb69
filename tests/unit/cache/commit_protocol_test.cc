#include <atomic>
#include <catch2/catch.hpp>

#include "cache/commit_protocol.h"
#include "format/layout.h"
#include "support/cache_fixture.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::testing;
using cache::describe_commit_protocol;
using cache::kAllClassesShareFence;
using cache::shares_fence;

namespace {

struct FenceCounter final : pmem::PersistObserver {
  std::atomic<uint64_t> fences{0};
  std::atomic<uint64_t> lowest{UINT64_MAX}, highest{0};  // the span of every store
  void on_store(uint64_t offset, size_t len, pmem::StoreKind) override {
    if (offset < lowest) lowest = offset;
    if (offset + len > highest) highest = offset + len;
  }
  void on_flush(uint64_t, size_t) override {}
  void on_fence() override { ++fences; }
};

}  // namespace

TEST_CASE("a commit's data size picks its size class's protocol", "[cache][commit]") {
  const cache::SharedFenceClasses four_to_sixteen = 0b111000;  // 4, 8 and 16 KiB
  CHECK_FALSE(shares_fence(four_to_sixteen, 512));
  CHECK_FALSE(shares_fence(four_to_sixteen, 4095));
  CHECK(shares_fence(four_to_sixteen, 4096));
  CHECK(shares_fence(four_to_sixteen, 6 * 1024));  // the largest class not above it: 4 KiB
  CHECK(shares_fence(four_to_sixteen, 32 * 1024 - 1));
  CHECK_FALSE(shares_fence(four_to_sixteen, 32 * 1024));
  CHECK(shares_fence(kAllClassesShareFence, 64 * MiB));  // above 1 MiB: the 1 MiB class
  CHECK_FALSE(shares_fence(0, 4096));
}

TEST_CASE("the commit protocol is described by the ranges that share a fence", "[cache][commit]") {
  CHECK(describe_commit_protocol(0) == "commit: data fenced before its key set");
  CHECK(describe_commit_protocol(kAllClassesShareFence) == "commit: data and key set share one fence");
  CHECK(describe_commit_protocol(0b111000) ==
        "commit: data and key set share one fence for 4 KiB-16 KiB, data fenced first otherwise");
  CHECK(describe_commit_protocol(0b1000001000) ==
        "commit: data and key set share one fence for 4 KiB, 256 KiB, data fenced first otherwise");
}

TEST_CASE("measuring the commit protocols stores only into the scratch area", "[cache][commit]") {
  constexpr uint64_t kScratchAt = 2 * MiB, kScratchLength = 8 * MiB;
  EmulatedPmem pmem(kScratchAt + kScratchLength + 2 * MiB);
  pmem::CopyPolicy policy(pmem::PolicyTable{}, "test");
  FenceCounter observed;
  pmem::PmemWriter writer(*pmem.region, policy, &observed);
  const cache::SharedFenceClasses classes = cache::measure_commit_protocol(writer, kScratchAt, kScratchLength);
  CHECK((classes & ~kAllClassesShareFence) == 0);
  CHECK(observed.lowest >= kScratchAt);
  CHECK(observed.highest <= kScratchAt + kScratchLength);
  CHECK(observed.fences > 2 * pmem::kSizeClassCount);  // both protocols, every class, many rounds
}

TEST_CASE("a write takes one fence when its data shares it with its key set, two when fenced first",
          "[cache][commit][engine]") {
  const bool shared = GENERATE(true, false);
  INFO((shared ? "shared fence" : "data fenced first"));
  CacheFiles files(format::kDataStart + 16 * MiB, 32 * MiB);
  open_cache(files.options(true))->abandon();
  FenceCounter observed;
  cache::CacheOptions options = hold_writeback(files.options());
  options.commit_shared_fence_classes = shared ? kAllClassesShareFence : 0;
  options.persist_observer = &observed;
  {
    auto cache = open_cache(options);
    CHECK_THAT(cache->copy_policy_description(),
               Catch::Matchers::EndsWith(describe_commit_protocol(*options.commit_shared_fence_classes)));
    auto queue = make_queue(*cache);
    const auto first = pattern(1, 0, 8);
    REQUIRE(queue->write(0, 8, first.data()) == 4096);  // opens a data segment: a fence of its own
    const uint64_t before = observed.fences;
    const auto second = pattern(2, 64, 8);
    REQUIRE(queue->write(64, 8, second.data()) == 4096);
    CHECK(observed.fences - before == (shared ? 1u : 2u));
    // A discard or write-zeroes has no data to fence first: one fence, whatever the protocol.
    const uint64_t before_discard = observed.fences;
    REQUIRE(queue->discard(128, 8) == 0);
    CHECK(observed.fences - before_discard == 1u);
    const uint64_t before_zeroes = observed.fences;
    REQUIRE(queue->write_zeroes(136, 8) == 0);
    CHECK(observed.fences - before_zeroes == 1u);
    queue.reset();
    cache->abandon();
  }
  // Either way the writes replay (the digest of a shared-fence set checks out, and a set of
  // data fenced first needs none).
  auto cache = open_cache(files.options());
  auto queue = make_queue(*cache);
  std::vector<std::byte> buffer(4096);
  REQUIRE(queue->read(64, 8, buffer.data()) == 4096);
  CHECK(buffer == pattern(2, 64, 8));
  REQUIRE(queue->read(0, 8, buffer.data()) == 4096);
  CHECK(buffer == pattern(1, 0, 8));
  REQUIRE(queue->read(136, 8, buffer.data()) == 4096);
  CHECK(buffer == std::vector<std::byte>(4096));
}
