// Looks through a JSON value without recursion (fuzzed documents nest deeply).
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace pcached::fuzz {

// True if some number in the value is infinite or NaN: JSON has no such numbers, so they do not
// survive a dump and parse (nlohmann writes null), and round-trip checks must leave them out.
inline bool has_non_finite_number(const nlohmann::json& value) {
  std::vector<const nlohmann::json*> pending{&value};
  while (!pending.empty()) {
    const nlohmann::json* v = pending.back();
    pending.pop_back();
    if (v->is_number_float() && !std::isfinite(v->get<double>())) return true;
    if (v->is_structured()) {
      for (const auto& element : *v) pending.push_back(&element);
    }
  }
  return false;
}

}  // namespace pcached::fuzz
