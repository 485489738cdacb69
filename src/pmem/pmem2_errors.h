// libpmem2 returns either a negated errno or one of its own PMEM2_E_* codes (below -100000).
// Debian's libpmem2 1.12 does not export pmem2_err_to_errno, so we map them ourselves.
#pragma once

#include <libpmem2.h>

#include <cerrno>

namespace pcached::pmem {

inline int errno_from_pmem2(int rc) {
  if (rc < 0 && rc > PMEM2_E_UNKNOWN) return -rc;
  switch (rc) {
    case PMEM2_E_NOSUPP:
    case PMEM2_E_GRANULARITY_NOT_SUPPORTED:
    case PMEM2_E_SOURCE_TYPE_NOT_SUPPORTED:
      return ENOTSUP;
    case PMEM2_E_NO_ACCESS:
      return EACCES;
    case PMEM2_E_IO_FAIL:
      return EIO;
    default:
      return EINVAL;
  }
}

}  // namespace pcached::pmem
