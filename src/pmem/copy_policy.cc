#include "pcached/copy_policy.h"

#include <cctype>

#include "pcached/pmem_region.h"
#include "pcached/units.h"
#include "pmem/cpu_features.h"

namespace pcached::pmem {

namespace {

constexpr std::string_view kThresholdPrefix = "threshold:";

std::string spec_help() {
  return "expected auto, nt, clflushopt, clwb, cached (eADR only) or threshold:<size> (e.g. threshold:4K: non-temporal below "
         "4 KiB, cached copy + flush from 4 KiB up)";
}

Status unsupported(CopyMethod method) {
  return Status::error(ENOTSUP, "copy method " + std::string(to_string(method)) + " needs an instruction this CPU (" +
                                    cpu_features().brand + ") does not have");
}

}  // namespace

Result<PolicySpec> parse_policy_spec(std::string_view text) {
  PolicySpec spec;
  if (text == "auto") return spec;
  if (auto method = parse_copy_method(text)) {
    spec.kind = PolicySpec::Kind::Fixed;
    spec.method = *method;
    return spec;
  }
  if (text.starts_with(kThresholdPrefix)) {
    Result<uint64_t> size = parse_size(text.substr(kThresholdPrefix.size()));
    if (!size.ok()) return size.status().with_context("invalid copy policy '" + std::string(text) + "'");
    spec.kind = PolicySpec::Kind::Threshold;
    spec.threshold = size.value();
    return spec;
  }
  return Status::error(EINVAL, "invalid copy policy '" + std::string(text) + "': " + spec_help());
}

std::string to_string(const PolicySpec& spec) {
  switch (spec.kind) {
    case PolicySpec::Kind::Auto:
      return "auto";
    case PolicySpec::Kind::Fixed:
      return std::string(to_string(spec.method));
    case PolicySpec::Kind::Threshold:
      return std::string(kThresholdPrefix) + format_size(spec.threshold);
  }
  return "unknown";
}

Result<PolicyTable> table_for_spec(const PolicySpec& spec) {
  const CpuFeatures& cpu = cpu_features();
  PolicyTable table;
  table.fill(CopyMethod::NonTemporal);
  switch (spec.kind) {
    case PolicySpec::Kind::Auto:
      return Status::error(EINVAL, "copy policy auto has no fixed table: it is calibrated on the region");
    case PolicySpec::Kind::Fixed:
      if (!cpu.supports(spec.method)) return unsupported(spec.method);
      table.fill(spec.method);
      return table;
    case PolicySpec::Kind::Threshold: {
      const CopyMethod cached = cpu.clwb ? CopyMethod::Clwb : CopyMethod::Clflushopt;
      if (!cpu.supports(cached)) return unsupported(cached);
      for (size_t i = 0; i < kSizeClassCount; ++i) {
        if (size_class_bytes(i) >= spec.threshold) table[i] = cached;
      }
      return table;
    }
  }
  return table;
}

bool usable_on(const Region& region, CopyMethod method) {
  if (!cpu_features().supports(method)) return false;
  return method != CopyMethod::Cached || region.granularity() == Granularity::Byte;
}

CopyPolicy::CopyPolicy(const PolicyTable& table, std::string origin) : origin_(std::move(origin)) {
  for (size_t i = 0; i < kSizeClassCount; ++i) methods_[i].store(table[i], std::memory_order_relaxed);
}

PolicyTable CopyPolicy::table() const {
  PolicyTable table;
  for (size_t i = 0; i < kSizeClassCount; ++i) table[i] = methods_[i].load(std::memory_order_relaxed);
  return table;
}

std::string CopyPolicy::origin() const {
  std::lock_guard lock(origin_mutex_);
  return origin_;
}

void CopyPolicy::replace(const PolicyTable& table, std::string origin) {
  std::lock_guard lock(origin_mutex_);
  // Writers may see a mix of old and new entries for a moment; every entry is a valid method, and
  // each copy flushes according to the method it actually used, so a mix is harmless.
  for (size_t i = 0; i < kSizeClassCount; ++i) methods_[i].store(table[i], std::memory_order_relaxed);
  origin_ = std::move(origin);
}

}  // namespace pcached::pmem
