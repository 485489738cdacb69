// The header at the start of every segment: what the segment currently is and its generation.
// The generation goes up (persistently) each time a segment is reused, and every key names the
// generation of the data segment it points into, so stale keys never resurrect old data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/layout.h"
#include "pcached/status.h"

namespace pcached::format {

enum class SegmentType : uint32_t { Free = 0, Data = 1, Journal = 2 };

struct SegmentHeader {
  SegmentType type = SegmentType::Free;
  uint32_t generation = 0;
  uint32_t index = 0;         // the segment's own number: a header found elsewhere is damage
  uint32_t journal_slot = 0;  // Journal: which journal (control-area slot) it belongs to
  bool operator==(const SegmentHeader&) const = default;
};

void encode_segment_header(const SegmentHeader& header, uint32_t salt,
                           std::span<std::byte, kSegmentHeaderEncodedSize> out);
// ENODATA for a segment never written in this format (no magic or another format's salt),
// EBADMSG for a damaged one.
Result<SegmentHeader> decode_segment_header(std::span<const std::byte, kSegmentHeaderEncodedSize> in, uint32_t salt);

}  // namespace pcached::format
