// How a region's copy policy is chosen when it opens: the operator's fixed choice, a saved
// calibration of this CPU model, or a fresh calibration on the region's scratch area.
#include <spdlog/spdlog.h>

#include "pcached/calibration.h"
#include "pcached/copy_policy.h"
#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"

namespace pcached::pmem {

namespace {

std::string describe(const PolicyTable& table) {
  std::string text;
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    if (i > 0) text += ' ';
    text += format_size(size_class_bytes(i)) + "=" + std::string(to_string(table[i]));
  }
  return text;
}

// A saved table is reused only where it was measured: same CPU model, same granularity, and
// every method it names still supported.
Result<PolicyTable> usable_saved_table(const std::string& path, const Region& region) {
  Result<SavedCalibration> saved = load_calibration(path);
  if (!saved.ok()) return saved.status();
  if (saved->cpu != cpu_features().brand) {
    return Status::error(ESTALE, "calibration " + path + " was made on '" + saved->cpu + "', this CPU is '" +
                                     cpu_features().brand + "'");
  }
  if (saved->granularity != to_string(region.granularity())) {
    return Status::error(ESTALE, "calibration " + path + " was made for " + saved->granularity +
                                     " granularity, this region has " + to_string(region.granularity()));
  }
  for (CopyMethod method : saved->table) {
    if (!usable_on(region, method)) {
      return Status::error(ESTALE, "calibration " + path + " names " + std::string(to_string(method)) +
                                       ", which this CPU does not support");
    }
  }
  return saved->table;
}

}  // namespace

Result<std::unique_ptr<CopyPolicy>> make_copy_policy(const Region& region, const CopyPolicySettings& settings) {
  if (settings.spec.kind != PolicySpec::Kind::Auto) {
    Result<PolicyTable> table = table_for_spec(settings.spec);
    if (!table.ok()) return table.status().with_context("pmem region " + region.path());
    for (CopyMethod method : table.value()) {
      if (!usable_on(region, method)) {
        return Status::error(ENOTSUP, "pmem region " + region.path() + ": copy method " +
                                          std::string(to_string(method)) +
                                          " leaves data in the CPU caches, which only an eADR region (byte store "
                                          "granularity) keeps through a power cut; this region has " +
                                          to_string(region.granularity()) + " granularity");
      }
    }
    return std::make_unique<CopyPolicy>(table.value(), "fixed " + to_string(settings.spec));
  }

  if (!settings.saved_table_path.empty()) {
    Result<PolicyTable> saved = usable_saved_table(settings.saved_table_path, region);
    if (saved.ok()) {
      spdlog::info("pmem region {}: copy policy from {}: {}", region.path(), settings.saved_table_path,
                   describe(saved.value()));
      return std::make_unique<CopyPolicy>(saved.value(), "saved " + settings.saved_table_path);
    }
    spdlog::info("pmem region {}: not using the saved copy calibration ({}); calibrating", region.path(),
                 saved.status().message());
  }

  const uint64_t scratch_length = settings.scratch_length != 0 ? settings.scratch_length : region.size();
  if (scratch_length < kLargestSizeClass || settings.scratch_offset > region.size() ||
      scratch_length > region.size() - settings.scratch_offset) {
    return Status::error(EINVAL, "pmem region " + region.path() + ": calibration scratch area [" +
                                     std::to_string(settings.scratch_offset) + ", +" + std::to_string(scratch_length) +
                                     ") must lie inside the region and hold " + format_size(kLargestSizeClass));
  }

  // Calibrate through a writer of its own so its copies do not show up in anyone's counters.
  CopyPolicy provisional(PolicyTable{}, "calibrating");
  PmemWriter writer(region, provisional);
  CalibrationOptions options;
  options.scratch_offset = settings.scratch_offset;
  options.scratch_length = scratch_length;
  options.budget = settings.calibration_budget;
  const CalibrationReport report = calibrate_region(writer, options);
  if (!report.complete()) {
    spdlog::warn("pmem region {}: calibration budget of {} ms ran out after {} of {} size classes", region.path(),
                 settings.calibration_budget.count(), report.classes_measured, kSizeClassCount);
  }
  spdlog::info("pmem region {}: calibrated copy policy in {:.0f} ms: {}", region.path(),
               std::chrono::duration<double, std::milli>(report.elapsed).count(), describe(report.chosen));

  if (!settings.saved_table_path.empty() && report.complete()) {
    SavedCalibration saved{report.chosen, report.mib_per_s, cpu_features().brand, to_string(region.granularity())};
    if (Status status = save_calibration(settings.saved_table_path, saved); !status.ok()) {
      spdlog::warn("pmem region {}: {}", region.path(), status.message());
    }
  }
  return std::make_unique<CopyPolicy>(report.chosen, "calibrated");
}

}  // namespace pcached::pmem
