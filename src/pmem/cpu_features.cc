#include "pmem/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <cstring>

namespace pcached::pmem {

namespace {

constexpr unsigned kLeafExtendedFeatures = 7;
constexpr unsigned kEbxAvx512f = 1u << 16;
constexpr unsigned kEbxClflushopt = 1u << 23;
constexpr unsigned kEbxClwb = 1u << 24;

std::string read_brand() {
  unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);
  if (max_extended < 0x80000004u) return "unknown";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    unsigned regs[4];
    __get_cpuid(0x80000002u + i, &regs[0], &regs[1], &regs[2], &regs[3]);
    std::memcpy(brand + i * 16, regs, sizeof regs);
  }
  std::string text(brand);
  text.erase(0, text.find_first_not_of(' '));
  text.erase(text.find_last_not_of(' ') + 1);
  return text;
}

CpuFeatures detect() {
  CpuFeatures features;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (static_cast<unsigned>(__get_cpuid_max(0, nullptr)) >= kLeafExtendedFeatures &&
      __get_cpuid_count(kLeafExtendedFeatures, 0, &eax, &ebx, &ecx, &edx)) {
    features.clflushopt = (ebx & kEbxClflushopt) != 0;
    features.clwb = (ebx & kEbxClwb) != 0;
    features.avx512f = (ebx & kEbxAvx512f) != 0;
  }
  features.brand = read_brand();
  return features;
}

}  // namespace

bool CpuFeatures::supports(CopyMethod method) const {
  switch (method) {
    case CopyMethod::NonTemporal:
      return true;  // SSE2 streaming stores are part of x86-64
    case CopyMethod::Clflushopt:
      return clflushopt;
    case CopyMethod::Clwb:
      return clwb;
    case CopyMethod::Cached:
      return true;  // no instruction needed; whether the region allows it is usable_on()'s question
  }
  return false;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace pcached::pmem
