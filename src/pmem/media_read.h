// Copying out of pmem without dying on a media error. A load from a poisoned pmem line (or from a
// file page that no longer exists) raises SIGBUS; the guarded copy catches it for the calling
// thread and reports the faulting address instead.
#pragma once

#include <cstddef>

namespace pcached::pmem {

// Copies len bytes from src (inside a pmem mapping) to dst. Returns true on success; on a SIGBUS
// raised by a load from [src, src+len) returns false and stores the faulting address. A SIGBUS
// anywhere else keeps its default (fatal) meaning.
bool guarded_copy(void* dst, const void* src, size_t len, const void** fault_address);

}  // namespace pcached::pmem
