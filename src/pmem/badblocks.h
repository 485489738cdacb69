// Known bad blocks of a pmem source, as libpmem2 reports them (through libndctl for devdax and
// fsdax namespaces).
#pragma once

#include <vector>

#include "pcached/pmem_region.h"

struct pmem2_source;

namespace pcached::pmem {

// Sorted, merged list of bad ranges in bytes relative to the start of the source. A source that
// has no notion of bad blocks (a file on a non-DAX filesystem) has none. A source whose bad
// blocks cannot be read is an error: the caller decides whether to go on without the list.
Result<std::vector<BadRange>> read_badblocks(const pmem2_source* source);

// Inserts [offset, offset+length) into a sorted list, merging overlapping and adjacent ranges.
void add_bad_range(std::vector<BadRange>& ranges, BadRange range);

}  // namespace pcached::pmem
