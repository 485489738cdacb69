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

// Installs the process's SIGBUS handler (once; guarded_copy does it on first use). Besides faults
// of guarded copies, it takes early memory-failure reports (BUS_MCEERR_AO) to the monitor of
// memory_failure.h when one runs.
void install_sigbus_handler();

}  // namespace pcached::pmem
