#include "common/cycle_clock.h"

#include <cmath>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pcached {

std::atomic<uint64_t> CycleClock::nanoseconds_per_tick_{0};

namespace {

// CPUID leaf 0x80000007, EDX bit 8 (Intel and AMD alike): the TSC runs at a constant rate in all
// P-, C- and T-states, and the cores' counters are kept in step. Hypervisors that cannot promise
// it (migration between hosts of different rates) clear the bit.
bool tsc_is_invariant() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);  // int in clang's cpuid.h
  if (max_extended < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

}  // namespace

void CycleClock::calibrate() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__x86_64__)
    if (!tsc_is_invariant()) return;
    // Long enough that the two clocks' reading costs are noise (well under 0.1 %).
    constexpr auto kSpan = std::chrono::milliseconds(2);
    const auto wall_start = std::chrono::steady_clock::now();
    const uint64_t tsc_start = __rdtsc();
    auto wall_end = wall_start;
    while (wall_end - wall_start < kSpan) wall_end = std::chrono::steady_clock::now();
    const uint64_t tsc_end = __rdtsc();
    if (tsc_end <= tsc_start) return;
    const double nanoseconds = std::chrono::duration<double, std::nano>(wall_end - wall_start).count();
    const double per_tick = nanoseconds / static_cast<double>(tsc_end - tsc_start) * std::ldexp(1.0, kFractionBits);
    // At least 1: 0 stands for steady_clock (a TSC over 4e18 Hz would need more fraction bits).
    nanoseconds_per_tick_.store(std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(per_tick))),
                                std::memory_order_relaxed);
#endif
  });
}

}  // namespace pcached
