#include "format/data_hash.h"

#include <cassert>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/data_hash_avx2.h"
#include "format/endian.h"
#include "format/layout.h"

namespace pcached::format {

uint64_t data_hash(const void* data, size_t len) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? data_hash_avx2(data, len) : XXH3_64bits(data, len);
}

uint64_t data_digest(std::span<const uint64_t> key_hashes) {
  // One call over the hashes laid out little-endian (a key set holds at most kMaxKeysPerSet keys).
  std::byte bytes[kMaxKeysPerSet * sizeof(uint64_t)];
  assert(key_hashes.size() <= kMaxKeysPerSet);
  for (size_t i = 0; i < key_hashes.size(); ++i) store_le<uint64_t>(bytes + i * sizeof(uint64_t), key_hashes[i]);
  return XXH3_64bits(bytes, key_hashes.size() * sizeof(uint64_t));
}

}  // namespace pcached::format
