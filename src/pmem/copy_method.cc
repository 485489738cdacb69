#include "pcached/copy_method.h"

namespace pcached::pmem {

std::string_view to_string(CopyMethod method) {
  switch (method) {
    case CopyMethod::NonTemporal:
      return "nt";
    case CopyMethod::Clflushopt:
      return "clflushopt";
    case CopyMethod::Clwb:
      return "clwb";
    case CopyMethod::Cached:
      return "cached";
  }
  return "unknown";
}

std::optional<CopyMethod> parse_copy_method(std::string_view name) {
  for (CopyMethod method : kAllCopyMethods) {
    if (to_string(method) == name) return method;
  }
  return std::nullopt;
}

}  // namespace pcached::pmem
