// XXH3-64 compiled for AVX2; only for format/data_hash.cc, which checks that the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pcached::format {

uint64_t data_hash_avx2(const void* data, size_t len);

}  // namespace pcached::format
