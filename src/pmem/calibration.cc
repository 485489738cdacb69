#include "pcached/calibration.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <memory>
#include <random>

#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"

namespace pcached::pmem {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kOffsetAlignment = 512;
// Each timed batch moves at least this much (and at least kMinCopiesPerBatch copies), so one
// batch lasts well above the clock's resolution even for 512-byte copies.
constexpr uint64_t kMinBatchBytes = 2 * MiB;
constexpr uint64_t kMinCopiesPerBatch = 8;
constexpr uint64_t kCopiesBetweenClockChecks = 64;

std::vector<CopyMethod> methods_to_measure(const CalibrationOptions& options) {
  if (!options.methods.empty()) return options.methods;
  std::vector<CopyMethod> methods;
  for (CopyMethod method : kAllCopyMethods) {
    if (cpu_features().supports(method)) methods.push_back(method);
  }
  return methods;
}

struct AlignedBuffer {
  explicit AlignedBuffer(size_t size) : data(static_cast<std::byte*>(std::aligned_alloc(4096, size))) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

CalibrationReport calibrate(const CopyProbe& probe, const CalibrationOptions& options) {
  assert(options.scratch_length >= kLargestSizeClass);
  const std::vector<CopyMethod> methods = methods_to_measure(options);
  const auto start = Clock::now();

  AlignedBuffer source(kLargestSizeClass);
  std::mt19937_64 rng(options.seed);
  for (size_t i = 0; i < kLargestSizeClass; ++i) source.data[i] = static_cast<std::byte>(rng());

  CalibrationReport report;
  report.chosen.fill(methods.empty() ? CopyMethod::NonTemporal : methods.front());
  const unsigned rounds = std::max(1u, options.rounds);

  for (size_t size_class = 0; size_class < kSizeClassCount; ++size_class) {
    if (Clock::now() - start > options.budget) break;
    const size_t len = size_class_bytes(size_class);
    const uint64_t slots = (options.scratch_length - len) / kOffsetAlignment + 1;
    const uint64_t copies = std::max(kMinCopiesPerBatch, kMinBatchBytes / len);
    std::uniform_int_distribution<uint64_t> slot(0, slots - 1);

    std::vector<std::vector<double>> samples(methods.size());
    bool out_of_time = false;
    for (unsigned round = 0; round < rounds && !out_of_time; ++round) {
      for (size_t k = 0; k < methods.size() && !out_of_time; ++k) {
        // Rotate who goes first so a method never always follows the same one.
        const size_t m = (k + round) % methods.size();
        const auto batch_start = Clock::now();
        for (uint64_t i = 0; i < copies; ++i) {
          probe(methods[m], options.scratch_offset + slot(rng) * kOffsetAlignment, source.data, len);
          if (i % kCopiesBetweenClockChecks == 0 && Clock::now() - start > options.budget) {
            out_of_time = true;
            break;
          }
        }
        const std::chrono::duration<double> seconds = Clock::now() - batch_start;
        samples[m].push_back(static_cast<double>(copies * len) / MiB / std::max(seconds.count(), 1e-9));
      }
    }
    if (out_of_time) break;  // a class measured in part is not measured

    double best = -1.0;
    for (size_t m = 0; m < methods.size(); ++m) {
      const double mib_s = median(samples[m]);
      report.mib_per_s[size_class][static_cast<size_t>(methods[m])] = mib_s;
      if (mib_s > best) {
        best = mib_s;
        report.chosen[size_class] = methods[m];
      }
    }
    report.classes_measured = size_class + 1;
  }
  for (size_t size_class = report.classes_measured; size_class < kSizeClassCount && report.classes_measured > 0;
       ++size_class) {
    report.chosen[size_class] = report.chosen[report.classes_measured - 1];
  }
  report.elapsed = Clock::now() - start;
  return report;
}

CalibrationReport calibrate_region(PmemWriter& writer, const CalibrationOptions& options) {
  // Touch every scratch page first: page faults on a fresh file would otherwise be timed as copy
  // cost of whichever method happened to go first.
  writer.fill_nodrain(options.scratch_offset, 0, options.scratch_length);
  writer.drain();
  return calibrate(
      [&writer](CopyMethod method, uint64_t offset, const void* src, size_t len) {
        writer.copy_nodrain(offset, src, len, method);
        writer.drain();
      },
      options);
}

}  // namespace pcached::pmem
