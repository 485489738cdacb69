#include "common/cycle_clock.h"

#include <cpuid.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

namespace {

using pcached::CycleClock;

bool cpu_reports_invariant_tsc() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);  // int in clang's cpuid.h
  return max_extended >= 0x80000007u && __get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) && (edx & (1u << 8)) != 0;
}

}  // namespace

TEST_CASE("the cycle clock measures what steady_clock measures", "[common][clock]") {
  CycleClock::calibrate();
  CHECK(CycleClock::uses_tsc() == cpu_reports_invariant_tsc());
  for (const auto span : {std::chrono::milliseconds(5), std::chrono::milliseconds(50)}) {
    const auto wall_start = std::chrono::steady_clock::now();
    const CycleClock::Ticks start = CycleClock::now();
    std::this_thread::sleep_for(span);
    const CycleClock::Ticks end = CycleClock::now();
    const auto wall = std::chrono::steady_clock::now() - wall_start;
    const auto measured = CycleClock::between(start, end);
    // Both spans enclose the sleep; they differ by the readings' cost and the rate's error, which
    // goes either way (a TSan run once measured 171 ns more than steady_clock over 50 ms).
    const double wall_ns = static_cast<double>(std::chrono::nanoseconds(wall).count());
    CHECK(measured >= span);
    CHECK(static_cast<double>(measured.count()) <= 1.02 * wall_ns);
    CHECK(static_cast<double>(measured.count()) >= 0.98 * wall_ns);
  }
}

TEST_CASE("the cycle clock gives no span for readings out of order", "[common][clock]") {
  CycleClock::calibrate();
  const CycleClock::Ticks earlier = CycleClock::now();
  const CycleClock::Ticks later = CycleClock::now();
  CHECK(CycleClock::between(later, earlier).count() == 0);  // not an unsigned wrap-around
  CHECK(CycleClock::between(earlier, earlier).count() == 0);
}
