// How a write's data and its key set are made durable, chosen by measuring on the region.
//
// Two protocols are correct (docs/format.md, ordering rule 1): the data and its key set share
// one fence, the set carrying an XXH3 digest of the data that replay checks (hashing costs time
// in proportion to the data's size); or the data is fenced first and the set after it (one more
// persistence round trip, whatever the size). Which is cheaper depends on the CPU, the media and
// the size. On this project's AMD machine the shared fence wins from 4 to 16 KiB (hashing 4 KiB
// while its streaming stores drain costs less than the second round trip), the ordered one below
// and above (hashing 1 MiB costs 20 us more than a fence); under an emulator (qemu TCG) the
// hash's vector instructions cost microseconds and fencing first wins at every size.
#pragma once

#include <cstdint>
#include <string>

#include "pcached/copy_method.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

// Bit i set: commits whose data falls in pmem size class i (pmem::size_class_of) share one
// fence with their key set.
using SharedFenceClasses = uint32_t;
inline constexpr SharedFenceClasses kAllClassesShareFence = (1u << pmem::kSizeClassCount) - 1;

inline bool shares_fence(SharedFenceClasses classes, uint64_t data_bytes) {
  return (classes >> pmem::size_class_of(data_bytes)) & 1u;
}

// Measures both protocols for every size class on [scratch_offset, scratch_offset +
// scratch_length) of the writer's region (at least 4 MiB + 4 KiB; overwritten). A few
// milliseconds; a few hundred under an emulator.
SharedFenceClasses measure_commit_protocol(pmem::PmemWriter& writer, uint64_t scratch_offset, uint64_t scratch_length);

// "commit: one shared fence for 4 KiB-16 KiB, data fenced first otherwise", for status.
std::string describe_commit_protocol(SharedFenceClasses classes);

}  // namespace pcached::cache
