// XXH3 built for AVX2: this file alone is compiled with -mavx2 (see src/meson.build);
// data_hash.cc calls it only on CPUs that have AVX2.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "format/data_hash_avx2.h"

namespace pcached::format {

uint64_t data_hash_avx2(const void* data, size_t len) { return XXH3_64bits(data, len); }

}  // namespace pcached::format
