#include "pmem/badblocks.h"
#include "pmem/pmem2_errors.h"

#include <libpmem2.h>

#include <algorithm>
#include <memory>
#include <string>

namespace pcached::pmem {

void add_bad_range(std::vector<BadRange>& ranges, BadRange range) {
  if (range.length == 0) return;
  auto it = std::lower_bound(ranges.begin(), ranges.end(), range,
                             [](const BadRange& a, const BadRange& b) { return a.offset < b.offset; });
  it = ranges.insert(it, range);
  // Merge with the predecessor, then swallow successors that now overlap or touch.
  if (it != ranges.begin() && std::prev(it)->offset + std::prev(it)->length >= it->offset) {
    auto prev = std::prev(it);
    prev->length = std::max(prev->offset + prev->length, it->offset + it->length) - prev->offset;
    it = std::prev(ranges.erase(it));
  }
  auto next = std::next(it);
  while (next != ranges.end() && it->offset + it->length >= next->offset) {
    it->length = std::max(it->offset + it->length, next->offset + next->length) - it->offset;
    next = ranges.erase(next);
  }
}

Result<std::vector<BadRange>> read_badblocks(const pmem2_source* source) {
  pmem2_badblock_context* raw_context = nullptr;
  const int rc = pmem2_badblock_context_new(&raw_context, source);
  if (rc == PMEM2_E_NO_BAD_BLOCK_FOUND) return std::vector<BadRange>{};
  if (rc != 0) {
    // Plain files on filesystems without DAX have no bad-block list at all.
    if (rc == PMEM2_E_NOSUPP || rc == PMEM2_E_INVALID_FILE_TYPE) return std::vector<BadRange>{};
    return Status::error(errno_from_pmem2(rc), std::string("cannot read bad blocks: ") + pmem2_errormsg());
  }
  auto deleter = [](pmem2_badblock_context* ctx) { pmem2_badblock_context_delete(&ctx); };
  std::unique_ptr<pmem2_badblock_context, decltype(deleter)> context(raw_context, deleter);

  std::vector<BadRange> ranges;
  pmem2_badblock badblock{};
  int next_rc = 0;
  while ((next_rc = pmem2_badblock_next(context.get(), &badblock)) == 0) {
    add_bad_range(ranges, {badblock.offset, badblock.length});
  }
  if (next_rc != PMEM2_E_NO_BAD_BLOCK_FOUND) {
    return Status::error(errno_from_pmem2(next_rc), std::string("cannot read bad blocks: ") + pmem2_errormsg());
  }
  return ranges;
}

}  // namespace pcached::pmem
