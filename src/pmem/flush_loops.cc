#include "pmem/flush_loops.h"

#include <immintrin.h>

#include <cstdint>

#include "pcached/pmem_region.h"

namespace pcached::pmem {

namespace {

struct LineSpan {
  uintptr_t first;
  uintptr_t end;
};

inline LineSpan lines_of(const void* addr, size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  return {start & ~(uintptr_t{kCacheLine} - 1), start + len};
}

}  // namespace

// The instructions need their target enabled per function: the rest of the binary must still run
// on CPUs without them (the copy policy never selects an unsupported method).
__attribute__((target("clflushopt"))) void flush_clflushopt(const void* addr, size_t len) {
  const LineSpan span = lines_of(addr, len);
  for (uintptr_t line = span.first; line < span.end; line += kCacheLine) {
    _mm_clflushopt(reinterpret_cast<void*>(line));
  }
}

__attribute__((target("clwb"))) void flush_clwb(const void* addr, size_t len) {
  const LineSpan span = lines_of(addr, len);
  for (uintptr_t line = span.first; line < span.end; line += kCacheLine) {
    _mm_clwb(reinterpret_cast<void*>(line));
  }
}

void flush_clflush(const void* addr, size_t len) {
  const LineSpan span = lines_of(addr, len);
  for (uintptr_t line = span.first; line < span.end; line += kCacheLine) {
    _mm_clflush(reinterpret_cast<void*>(line));
  }
}

void store_fence() { _mm_sfence(); }

}  // namespace pcached::pmem
