// How much work the long-running tests do. PCACHED_TEST_SCALE multiplies their iteration counts
// (default 1): the ThreadSanitizer build sets it below 1 because everything runs about ten times
// slower there; the tests still run every path, only fewer rounds of it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace pcached::testing {

inline double test_scale() {
  const char* text = std::getenv("PCACHED_TEST_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  const double scale = std::strtod(text, &end);
  return end != text && *end == '\0' && scale > 0 ? scale : 1.0;
}

// count times the scale, at least 1.
inline unsigned scaled(unsigned count) {
  return std::max(1u, static_cast<unsigned>(std::lround(count * test_scale())));
}

// The value of an unsigned environment variable, or fallback when it is unset or not a number.
inline unsigned env_count(const char* name, unsigned fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  return *end == '\0' ? static_cast<unsigned>(value) : fallback;
}

}  // namespace pcached::testing
