// Measuring which copy method is fastest for each size class, on the region itself.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pcached/copy_policy.h"
#include "pcached/pmem_region.h"

namespace pcached::pmem {

class PmemWriter;

// Copies len bytes from src to the scratch area at offset with the given method and makes them
// durable. Calibration times it; tests substitute a slowed-down probe.
using CopyProbe = std::function<void(CopyMethod method, uint64_t offset, const void* src, size_t len)>;

struct CalibrationOptions {
  uint64_t scratch_offset = 0;
  uint64_t scratch_length = 0;  // must hold at least one largest-class copy
  std::chrono::milliseconds budget{400};
  unsigned rounds = 7;  // per size class and method; the median round counts
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  std::vector<CopyMethod> methods;  // empty: every method this CPU supports
};

using ThroughputTable = std::array<std::array<double, kCopyMethodCount>, kSizeClassCount>;  // MiB/s, 0 = not measured

struct CalibrationReport {
  PolicyTable chosen{};
  ThroughputTable mib_per_s{};
  size_t classes_measured = 0;  // < kSizeClassCount when the budget ran out
  std::chrono::nanoseconds elapsed{};
  bool complete() const { return classes_measured == kSizeClassCount; }
};

// Times every method for every size class, random 512-byte-aligned offsets inside the scratch
// area, round-robin between methods so a burst of host noise hits them alike. Stops early when
// the budget is spent; unmeasured classes take the choice of the largest measured class.
CalibrationReport calibrate(const CopyProbe& probe, const CalibrationOptions& options);

// The same with a real writer: each copy is drained, the scratch area is pre-faulted first.
CalibrationReport calibrate_region(PmemWriter& writer, const CalibrationOptions& options);

// A calibration saved to disk (JSON), valid only for the CPU model and granularity it was made on.
struct SavedCalibration {
  PolicyTable table{};
  ThroughputTable mib_per_s{};
  std::string cpu;
  std::string granularity;
};
std::string calibration_to_json(const SavedCalibration& saved);
Result<SavedCalibration> calibration_from_json(const std::string& text);
Status save_calibration(const std::string& path, const SavedCalibration& saved);
Result<SavedCalibration> load_calibration(const std::string& path);

}  // namespace pcached::pmem
