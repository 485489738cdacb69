// Which copy method each request-size class uses. The crossover between non-temporal and cached
// copies depends on the media and the platform, so by default it is measured on the region itself
// (calibration.h); an operator can also fix it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "pcached/copy_method.h"
#include "pcached/status.h"

namespace pcached::pmem {

class Region;

using PolicyTable = std::array<CopyMethod, kSizeClassCount>;

// What the operator asked for: "auto" (calibrate, or load a saved calibration), one method for
// every size ("nt", "clflushopt", "clwb"), or "threshold:<size>": non-temporal below the size and
// the best cached copy + flush from it up.
struct PolicySpec {
  enum class Kind { Auto, Fixed, Threshold };
  Kind kind = Kind::Auto;
  CopyMethod method = CopyMethod::NonTemporal;  // Fixed
  uint64_t threshold = 0;                       // Threshold, in bytes
};
Result<PolicySpec> parse_policy_spec(std::string_view text);
std::string to_string(const PolicySpec& spec);

// The table for a Fixed or Threshold spec on this CPU; fails if it needs a flush instruction the
// CPU lacks.
Result<PolicyTable> table_for_spec(const PolicySpec& spec);

// The live policy shared by every writer of one region. Lookups are lock-free (one relaxed load on
// the copy path); the table can be replaced at run time (pcached set <cache> copy-policy ...).
class CopyPolicy {
 public:
  CopyPolicy(const PolicyTable& table, std::string origin);

  CopyMethod method_for(size_t len) const {
    return methods_[size_class_of(len)].load(std::memory_order_relaxed);
  }
  PolicyTable table() const;
  // How the table came about: "calibrated", "saved /var/lib/pcached/...", "fixed nt", ...
  std::string origin() const;
  void replace(const PolicyTable& table, std::string origin);

 private:
  std::array<std::atomic<CopyMethod>, kSizeClassCount> methods_;
  mutable std::mutex origin_mutex_;
  std::string origin_;
};

// How a region gets its policy when it is opened.
struct CopyPolicySettings {
  PolicySpec spec;
  // Where calibration may write (it destroys what is there). Length 0: the whole region.
  uint64_t scratch_offset = 0;
  uint64_t scratch_length = 0;
  std::chrono::milliseconds calibration_budget{400};
  // With Auto: a table saved by an earlier calibration is used instead of calibrating when it was
  // made on this CPU model and for this granularity; a new calibration is saved there.
  std::string saved_table_path;
};

Result<std::unique_ptr<CopyPolicy>> make_copy_policy(const Region& region, const CopyPolicySettings& settings);

// Whether a method can make stores durable on this region with this CPU: the flush instructions
// must exist, and a copy without any flush needs an eADR (byte granularity) region.
bool usable_on(const Region& region, CopyMethod method);

}  // namespace pcached::pmem
