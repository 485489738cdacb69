#include "cache/commit_protocol.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <random>
#include <vector>

#include "format/data_hash.h"
#include "pcached/units.h"

namespace pcached::cache {

namespace {

using Clock = std::chrono::steady_clock;

// Per protocol and size class, alternating. The lower quartiles are compared: the cost of each
// without the interruptions and neighbours' noise a median still catches on a busy machine.
constexpr int kRounds = 32;
constexpr uint64_t kKeyLine = 64;
constexpr uint64_t kDataSlots = 4;  // data offsets rotate, so no round rewrites the last one's lines

int64_t lower_quartile(std::vector<int64_t>& samples) {
  const auto quartile = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 4);
  std::nth_element(samples.begin(), quartile, samples.end());
  return *quartile;
}

}  // namespace

SharedFenceClasses measure_commit_protocol(pmem::PmemWriter& writer, uint64_t scratch_offset, uint64_t scratch_length) {
  const uint64_t largest = pmem::kLargestSizeClass;
  const uint64_t key_area = scratch_offset + kDataSlots * largest;
  const uint64_t used = kDataSlots * largest + 2 * kRounds * kKeyLine;
  assert(scratch_length >= used);
  (void)scratch_length;
  std::vector<std::byte> source(largest);
  std::mt19937_64 rng(42);
  for (std::byte& b : source) b = static_cast<std::byte>(rng());
  std::array<std::byte, kKeyLine> key{};
  // Fault the pages in first: a first touch would be timed as the cost of whichever went first.
  writer.fill_nodrain(scratch_offset, 0, used);
  writer.drain();

  SharedFenceClasses classes = 0;
  uint64_t sink = 0;
  for (size_t size_class = 0; size_class < pmem::kSizeClassCount; ++size_class) {
    const uint64_t size = pmem::size_class_bytes(size_class);
    std::vector<int64_t> shared, data_first;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t data_at = scratch_offset + (static_cast<uint64_t>(round) % kDataSlots) * largest;
      const uint64_t key_at = key_area + static_cast<uint64_t>(2 * round) * kKeyLine;
      auto start = Clock::now();
      writer.copy_nodrain(data_at, source.data(), size);
      sink ^= format::data_hash(source.data(), size);
      writer.copy_nodrain(key_at, key.data(), key.size());
      writer.drain();
      shared.push_back((Clock::now() - start).count());

      start = Clock::now();
      writer.copy_nodrain(data_at, source.data(), size);
      writer.drain();
      writer.copy_nodrain(key_at + kKeyLine, key.data(), key.size());
      writer.drain();
      data_first.push_back((Clock::now() - start).count());
    }
    const int64_t shared_ns = lower_quartile(shared), data_first_ns = lower_quartile(data_first);
    spdlog::debug("commit protocol, {}: shared fence with digest {} ns, data fenced first {} ns",
                  format_size(size), shared_ns, data_first_ns);
    if (shared_ns < data_first_ns) classes |= 1u << size_class;
  }
  // Only the hashes' cost is wanted; keep the compiler from dropping them.
  asm volatile("" : : "r"(sink));
  return classes;
}

std::string describe_commit_protocol(SharedFenceClasses classes) {
  if ((classes & kAllClassesShareFence) == 0) return "commit: data fenced before its key set";
  if ((classes & kAllClassesShareFence) == kAllClassesShareFence) return "commit: data and key set share one fence";
  std::string ranges;
  for (size_t first = 0; first < pmem::kSizeClassCount; ++first) {
    if (!((classes >> first) & 1u) || (first > 0 && ((classes >> (first - 1)) & 1u))) continue;
    size_t last = first;
    while (last + 1 < pmem::kSizeClassCount && ((classes >> (last + 1)) & 1u)) ++last;
    if (!ranges.empty()) ranges += ", ";
    ranges += format_size(pmem::size_class_bytes(first));
    if (last != first) ranges += "-" + format_size(pmem::size_class_bytes(last));
  }
  return "commit: data and key set share one fence for " + ranges + ", data fenced first otherwise";
}

}  // namespace pcached::cache
