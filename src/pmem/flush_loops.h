// Our own cache-flush loops. libpmem2 picks one flush instruction per process at load time, so to
// offer clflushopt and clwb side by side (and calibrate between them) we flush ourselves. Each
// function flushes every cache line that [addr, addr+len) touches; none of them fences.
#pragma once

#include <cstddef>

namespace pcached::pmem {

void flush_clflushopt(const void* addr, size_t len);
void flush_clwb(const void* addr, size_t len);
void flush_clflush(const void* addr, size_t len);  // fallback: serialising, no fence needed
void store_fence();                                // sfence: orders flushes and NT stores before it

}  // namespace pcached::pmem
