// A cheap monotonic clock for latency figures. The engine reads a clock twice per request; a
// clock_gettime through the vDSO costs ~24 ns here, a read of the time-stamp counter ~10 ns, which
// is 5 % of a 4 KiB write into the cache. So the TSC is used where it ticks at one constant rate
// on every core and in every power state (the CPU's "invariant TSC"), converted to nanoseconds at a
// rate measured against steady_clock once (calibrate()); steady_clock is used everywhere else,
// and until calibrate() has run.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pcached {

class CycleClock {
 public:
  // An instant in ticks of whichever source is in use; only differences mean anything.
  using Ticks = uint64_t;

  // Measures the TSC's rate (about 2 ms, once per process; later calls return at once). Call it
  // before anything takes a reading: a difference of readings that straddle it is meaningless.
  static void calibrate();

  static Ticks now() {
#if defined(__x86_64__)
    if (nanoseconds_per_tick_.load(std::memory_order_relaxed) != 0) return __rdtsc();
#endif
    return static_cast<Ticks>(std::chrono::steady_clock::now().time_since_epoch().count());
  }

  // The time between two readings (0 if `later` is not later: the clock never runs backwards, but
  // a caller may mix up its readings).
  static std::chrono::nanoseconds between(Ticks earlier, Ticks later) {
    if (later <= earlier) return std::chrono::nanoseconds(0);
    const uint64_t per_tick = nanoseconds_per_tick_.load(std::memory_order_relaxed);
    const Ticks ticks = later - earlier;
    if (per_tick == 0) return std::chrono::steady_clock::duration(ticks);
    // Fixed point, not floating point: under an emulator (qemu TCG) each floating-point operation
    // is a call into software floating point, and this runs twice per request.
    const unsigned __int128 nanoseconds = (static_cast<unsigned __int128>(ticks) * per_tick) >> kFractionBits;
    return std::chrono::nanoseconds(static_cast<int64_t>(std::min<unsigned __int128>(nanoseconds, INT64_MAX)));
  }

  // Whether readings come from the TSC (for logs and tests).
  static bool uses_tsc() { return nanoseconds_per_tick_.load(std::memory_order_relaxed) != 0; }

 private:
  static constexpr unsigned kFractionBits = 32;
  // Nanoseconds per TSC tick, times 2^kFractionBits (0: steady_clock).
  static std::atomic<uint64_t> nanoseconds_per_tick_;
};

}  // namespace pcached
