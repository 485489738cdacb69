#include "pmem/throughput_meter.h"

#include <algorithm>
#include <cassert>
#include <random>

namespace pcached::pmem {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kOffsetAlignment = 512;  // requests are whole sectors
constexpr uint64_t kMinCopiesPerBatch = 8;
constexpr uint64_t kCopiesBetweenClockChecks = 64;
constexpr double kMiB = 1024.0 * 1024.0;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

const char* to_string(OffsetPattern pattern) { return pattern == OffsetPattern::Random ? "random" : "sequential"; }

std::optional<std::vector<double>> measure_copy_throughput(const std::vector<CopyRoutine>& routines, const void* src,
                                                           size_t len, const MeterOptions& options) {
  assert(len > 0 && options.area_length >= len);
  const uint64_t slots = (options.area_length - len) / kOffsetAlignment + 1;
  const uint64_t stride = (len + kOffsetAlignment - 1) / kOffsetAlignment;  // sequential: back to back
  const uint64_t copies = std::max(kMinCopiesPerBatch, options.min_batch_bytes / len);
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<uint64_t> random_slot(0, slots - 1);
  uint64_t next_slot = 0;
  auto next_offset = [&]() -> uint64_t {
    uint64_t slot = 0;
    if (options.pattern == OffsetPattern::Random) {
      slot = random_slot(rng);
    } else {
      if (next_slot >= slots) next_slot = 0;
      slot = next_slot;
      next_slot += stride;
    }
    return options.area_offset + slot * kOffsetAlignment;
  };

  const unsigned rounds = std::max(1u, options.rounds);
  std::vector<std::vector<double>> samples(routines.size());
  for (unsigned round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < routines.size(); ++k) {
      // Rotate who goes first so no routine always follows the same one.
      const size_t r = (k + round) % routines.size();
      const auto batch_start = Clock::now();
      for (uint64_t i = 0; i < copies; ++i) {
        routines[r](next_offset(), src, len);
        if (i % kCopiesBetweenClockChecks == 0 && Clock::now() > options.deadline) return std::nullopt;
      }
      const std::chrono::duration<double> seconds = Clock::now() - batch_start;
      samples[r].push_back(static_cast<double>(copies * len) / kMiB / std::max(seconds.count(), 1e-9));
    }
  }
  std::vector<double> result;
  result.reserve(routines.size());
  for (auto& routine_samples : samples) result.push_back(median(std::move(routine_samples)));
  return result;
}

}  // namespace pcached::pmem
