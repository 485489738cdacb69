// Timing copy routines against each other fairly: the same sizes and offsets, interleaved in
// rounds so a burst of host noise hits every candidate alike, the median round reported. Both the
// calibration and the copy benchmark measure with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace pcached::pmem {

// Copies len bytes from src to the region at offset (and makes them durable, if that is what is
// being measured).
using CopyRoutine = std::function<void(uint64_t offset, const void* src, size_t len)>;

enum class OffsetPattern { Random, Sequential };
const char* to_string(OffsetPattern pattern);

struct MeterOptions {
  uint64_t area_offset = 0;
  uint64_t area_length = 0;  // at least len
  OffsetPattern pattern = OffsetPattern::Random;
  unsigned rounds = 7;
  // Each timed batch moves at least this much and at least 8 copies, so that even 512-byte copies
  // last far longer than the clock's resolution.
  uint64_t min_batch_bytes = 2ull << 20;
  uint64_t seed = 1;
  // Give up (and return nothing) once this passes.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// Median MiB/s of each routine at copies of len bytes, in the order given; nullopt when the
// deadline passed first. src must hold len bytes.
std::optional<std::vector<double>> measure_copy_throughput(const std::vector<CopyRoutine>& routines, const void* src,
                                                           size_t len, const MeterOptions& options);

}  // namespace pcached::pmem
