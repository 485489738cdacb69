// What this CPU can do to push stores to the persistence domain (cpuid leaf 7).
#pragma once

#include <string>

#include "pcached/copy_method.h"

namespace pcached::pmem {

struct CpuFeatures {
  bool clflushopt = false;
  bool clwb = false;
  bool avx512f = false;
  std::string brand;  // "AMD EPYC ...", for saved calibration tables

  bool supports(CopyMethod method) const;
};

// Read once per process.
const CpuFeatures& cpu_features();

}  // namespace pcached::pmem
