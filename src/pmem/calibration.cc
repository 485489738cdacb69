#include "pcached/calibration.h"

#include <algorithm>
#include <cassert>
#include <random>

#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"
#include "pmem/throughput_meter.h"

namespace pcached::pmem {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<CopyMethod> methods_to_measure(const CalibrationOptions& options) {
  if (!options.methods.empty()) return options.methods;
  std::vector<CopyMethod> methods;
  for (CopyMethod method : kAllCopyMethods) {
    // Without a region to ask, only methods that flush (no eADR assumed).
    if (method != CopyMethod::Cached && cpu_features().supports(method)) methods.push_back(method);
  }
  return methods;
}

}  // namespace

CalibrationReport calibrate(const CopyProbe& probe, const CalibrationOptions& options) {
  assert(options.scratch_length >= kLargestSizeClass);
  const std::vector<CopyMethod> methods = methods_to_measure(options);
  const auto start = Clock::now();

  std::vector<CopyRoutine> routines;
  for (CopyMethod method : methods) {
    routines.push_back([&probe, method](uint64_t offset, const void* src, size_t len) { probe(method, offset, src, len); });
  }
  std::vector<std::byte> source(kLargestSizeClass);
  std::mt19937_64 rng(options.seed);
  for (std::byte& b : source) b = static_cast<std::byte>(rng());

  MeterOptions meter;
  meter.area_offset = options.scratch_offset;
  meter.area_length = options.scratch_length;
  meter.pattern = OffsetPattern::Random;
  meter.rounds = options.rounds;
  meter.seed = options.seed;
  meter.deadline = start + options.budget;

  CalibrationReport report;
  report.chosen.fill(methods.empty() ? CopyMethod::NonTemporal : methods.front());
  for (size_t size_class = 0; size_class < kSizeClassCount && !methods.empty(); ++size_class) {
    const auto measured = measure_copy_throughput(routines, source.data(), size_class_bytes(size_class), meter);
    if (!measured) break;  // budget spent; a class measured in part is not measured
    const auto best = std::max_element(measured->begin(), measured->end());
    report.chosen[size_class] = methods[static_cast<size_t>(best - measured->begin())];
    for (size_t m = 0; m < methods.size(); ++m) {
      report.mib_per_s[size_class][static_cast<size_t>(methods[m])] = (*measured)[m];
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

CalibrationReport calibrate_region(PmemWriter& writer, const CalibrationOptions& given) {
  CalibrationOptions options = given;
  if (options.methods.empty()) {
    // Every method the region can use: on eADR that includes the cached copy without a flush.
    for (CopyMethod method : kAllCopyMethods) {
      if (usable_on(writer.region(), method)) options.methods.push_back(method);
    }
  }
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
