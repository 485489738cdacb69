// Reading, erasing and writing the clean checkpoint (format/clean_checkpoint.h)
// on the region. Which extents go into it and how they are restored is the
// engine's (engine.cc, recovery.cc).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "format/clean_checkpoint.h"
#include "format/superblock.h"
#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

struct CleanCheckpoint {
  format::CheckpointHeader header;
  std::vector<format::CheckpointExtent> extents;
};

// What the region's scratch area holds, read only: no checkpoint (none written,
// or erased), a usable one, or one that cannot be used (logged, and treated as
// none: it names clean data only).
struct CheckpointRead {
  bool present = false;  // a header was there, usable or not: it must be erased
  std::optional<CleanCheckpoint> checkpoint;
};
CheckpointRead read_clean_checkpoint(const pmem::Region& region, const format::Superblock& superblock,
                                     uint64_t device_sectors);

// Erases the header, durably: the checkpoint is never read again.
void erase_clean_checkpoint(pmem::PmemWriter& writer);

// Writes the extents, then (once they are durable) the header that names them,
// as belonging to the control area's update number control_update_seq.
void write_clean_checkpoint(pmem::PmemWriter& writer, const format::Superblock& superblock,
                            std::span<const format::CheckpointExtent> extents, uint64_t control_update_seq);

}  // namespace pcached::cache
