#include "pcached/units.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace pcached {

namespace {

struct Suffix {
  std::string_view name;
  uint64_t multiplier;
};

constexpr std::array<Suffix, 13> kSuffixes{{
    {"", 1},        {"b", 1},         {"k", KiB},       {"kb", KiB},      {"kib", KiB},
    {"m", MiB},     {"mb", MiB},      {"mib", MiB},     {"g", GiB},       {"gb", GiB},
    {"gib", GiB},   {"t", 1024 * GiB}, {"tib", 1024 * GiB},
}};

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) {
    return Status::error(EINVAL, "invalid size " + quoted + ": expected a number such as 4096, 4K or 16MiB");
  }
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return Status::error(ERANGE, "invalid size " + quoted + ": too large");
    }
    value = value * 10 + digit;
  }
  std::string suffix(text.substr(digits));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Suffix& s : kSuffixes) {
    if (suffix != s.name) continue;
    if (value > std::numeric_limits<uint64_t>::max() / s.multiplier) {
      return Status::error(ERANGE, "invalid size " + quoted + ": too large");
    }
    return value * s.multiplier;
  }
  return Status::error(EINVAL, "invalid size " + quoted + ": unknown unit '" + std::string(text.substr(digits)) +
                                   "' (use K, M, G or T, binary multiples)");
}

std::string format_size(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  uint64_t whole = bytes;
  while (unit + 1 < kUnits.size() && whole >= 1024 && whole % 1024 == 0) {
    whole /= 1024;
    ++unit;
  }
  if (whole < 1024 || unit + 1 == kUnits.size()) return std::to_string(whole) + " " + std::string(kUnits[unit]);
  double scaled = static_cast<double>(bytes);
  unit = 0;
  while (unit + 1 < kUnits.size() && scaled >= 1024.0) {
    scaled /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", scaled, std::string(kUnits[unit]).c_str());
  return buf;
}

}  // namespace pcached
