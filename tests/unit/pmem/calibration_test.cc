#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "pcached/calibration.h"
#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;

namespace {

constexpr uint64_t kScratch = 32 * MiB;

// A probe that does the real copy, and repeats it for the handicapped method as often as its size
// class says (once for the others).
using Repeats = std::array<int, kSizeClassCount>;
CopyProbe handicapped_probe(PmemWriter& writer, CopyMethod slow, const Repeats& repeats) {
  return [&writer, slow, repeats](CopyMethod method, uint64_t offset, const void* src, size_t len) {
    const int count = method == slow ? repeats[size_class_of(len)] : 1;
    for (int i = 0; i < count; ++i) writer.copy_nodrain(offset, src, len, method);
    writer.drain();
  };
}

CalibrationOptions options_for(std::vector<CopyMethod> methods) {
  CalibrationOptions options;
  options.scratch_length = kScratch;
  options.budget = std::chrono::seconds(30);
  options.rounds = 5;
  options.methods = std::move(methods);
  return options;
}

}  // namespace

TEST_CASE("calibration picks the other method when one is artificially slowed", "[pmem][calibration]") {
  REQUIRE(cpu_features().clflushopt);
  EmulatedPmem pmem(kScratch);
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(*pmem.region, policy);
  writer.fill_nodrain(0, 0, kScratch);
  writer.drain();
  const std::vector<CopyMethod> pair = {CopyMethod::NonTemporal, CopyMethod::Clflushopt};
  // How the two compare unhandicapped. It varies with the machine and the build: under
  // ThreadSanitizer the cached copy (an instrumented memcpy) is far slower than libpmem2's
  // streaming one. The handicap makes the slowed method ten times slower than the other, whatever
  // their natural ratio.
  const Repeats once = [] {
    Repeats r;
    r.fill(1);
    return r;
  }();
  const CalibrationReport natural = calibrate(handicapped_probe(writer, pair[0], once), options_for(pair));
  REQUIRE(natural.complete());

  for (CopyMethod slowed : pair) {
    INFO("slowed " << to_string(slowed));
    const CopyMethod other = slowed == pair[0] ? pair[1] : pair[0];
    Repeats repeats;
    for (size_t i = 0; i < kSizeClassCount; ++i) {
      const double ratio = natural.mib_per_s[i][static_cast<size_t>(slowed)] / natural.mib_per_s[i][static_cast<size_t>(other)];
      repeats[i] = static_cast<int>(std::clamp(std::ceil(10 * ratio), 10.0, 10'000.0));
    }
    const CalibrationReport report = calibrate(handicapped_probe(writer, slowed, repeats), options_for(pair));
    REQUIRE(report.complete());
    for (size_t i = 0; i < kSizeClassCount; ++i) {
      INFO("size class " << size_class_bytes(i));
      CHECK(report.chosen[i] != slowed);
      CHECK(report.mib_per_s[i][static_cast<size_t>(slowed)] > 0.0);
    }
  }
}

TEST_CASE("calibration on a region measures every supported method for every size class", "[pmem][calibration]") {
  // On eADR the cached copy without a flush competes too; elsewhere it is never measured.
  const char* granularity = GENERATE("CACHE_LINE", "BYTE");
  INFO(granularity);
  EmulatedPmem pmem(kScratch, granularity);
  CopyPolicy policy(PolicyTable{}, "test");
  PmemWriter writer(*pmem.region, policy);
  CalibrationOptions options = options_for({});
  const CalibrationReport report = calibrate_region(writer, options);
  REQUIRE(report.complete());
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    CHECK(usable_on(*pmem.region, report.chosen[i]));
    double best = 0.0;
    for (CopyMethod method : kAllCopyMethods) {
      const double mib_s = report.mib_per_s[i][static_cast<size_t>(method)];
      CHECK((mib_s > 0.0) == usable_on(*pmem.region, method));
      best = std::max(best, mib_s);
    }
    // The choice is the fastest measured method.
    CHECK(report.mib_per_s[i][static_cast<size_t>(report.chosen[i])] == best);
  }
}

TEST_CASE("calibration stops when its budget is spent and fills the rest", "[pmem][calibration]") {
  const auto sleepy = [](CopyMethod, uint64_t, const void*, size_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  CalibrationOptions options = options_for({CopyMethod::NonTemporal, CopyMethod::Clwb});
  options.budget = std::chrono::milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  const CalibrationReport report = calibrate(sleepy, options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK_FALSE(report.complete());
  CHECK(report.classes_measured < kSizeClassCount);
  // Unmeasured classes carry the last measured choice (or the first method when none was measured).
  const CopyMethod fill = report.classes_measured > 0 ? report.chosen[report.classes_measured - 1] : CopyMethod::NonTemporal;
  for (size_t i = report.classes_measured; i < kSizeClassCount; ++i) CHECK(report.chosen[i] == fill);
  // Without the budget the sleeps alone would take minutes.
  CHECK(elapsed < std::chrono::seconds(10));
}
