// The ways a store can reach the persistence domain, and the request-size classes a copy policy
// assigns them to.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pcached::pmem {

enum class CopyMethod : uint8_t {
  NonTemporal,  // streaming stores that bypass the cache (libpmem2 PMEM2_F_MEM_NONTEMPORAL)
  Clflushopt,   // cached copy, then clflushopt for every line written
  Clwb,         // cached copy, then clwb for every line written (line stays cached)
  // Cached copy and no flush at all: only where the CPU caches are inside the persistence domain
  // (eADR, libpmem2's byte store granularity); the fence still orders it.
  Cached,
};
inline constexpr size_t kCopyMethodCount = 4;
inline constexpr std::array<CopyMethod, kCopyMethodCount> kAllCopyMethods{
    CopyMethod::NonTemporal, CopyMethod::Clflushopt, CopyMethod::Clwb, CopyMethod::Cached};

std::string_view to_string(CopyMethod method);  // "nt", "clflushopt", "clwb", "cached"
std::optional<CopyMethod> parse_copy_method(std::string_view name);

// Size classes 512 B, 1 KiB, ..., 1 MiB. A request of len bytes belongs to the largest class not
// above it (clamped at both ends), so 6 KiB uses the 4 KiB class.
inline constexpr size_t kSizeClassCount = 12;
inline constexpr size_t kSmallestSizeClass = 512;
inline constexpr size_t kLargestSizeClass = kSmallestSizeClass << (kSizeClassCount - 1);

constexpr size_t size_class_bytes(size_t index) { return kSmallestSizeClass << index; }

constexpr size_t size_class_of(size_t len) {
  constexpr size_t kSmallestWidth = std::bit_width(kSmallestSizeClass);
  const size_t width = std::bit_width(len);
  if (width <= kSmallestWidth) return 0;
  return std::min(width - kSmallestWidth, kSizeClassCount - 1);
}

}  // namespace pcached::pmem
