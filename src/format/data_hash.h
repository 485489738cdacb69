// The digest a key set keeps of its keys' data (format version 2), so that a write's data and its
// key can share one fence: replay checks the digest of each journal's last key set, the only one
// whose data a power cut can have left torn under a durable key.
//
// A data key's hash is XXH3-64 (seed 0) of its data; a key set's digest is XXH3-64 of the
// little-endian hashes of its data keys (write and written-through), in key order. XXH3 because it
// is computed on the write path, between the data's streaming stores and their fence, where a hash
// at memory speed costs next to nothing (CRC32C of 4 KiB takes longer than the fence it saves).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pcached::format {

// XXH3-64 of len bytes (AVX2 where the CPU has it; the result is the same everywhere).
uint64_t data_hash(const void* data, size_t len);

// The digest of a key set whose data keys have these hashes, in key order.
uint64_t data_digest(std::span<const uint64_t> key_hashes);

}  // namespace pcached::format
