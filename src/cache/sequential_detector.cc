#include "cache/sequential_detector.h"

#include <algorithm>

#include "format/layout.h"

namespace pcached::cache {

uint64_t SequentialDetector::observe(bool write, uint64_t sector, uint32_t sectors) {
  ++clock_;
  const uint64_t bytes = uint64_t{sectors} * format::kSectorSize;
  for (Stream& stream : streams_) {
    if (stream.write == write && stream.next_sector == sector) {
      stream.next_sector = sector + sectors;
      stream.bytes += bytes;
      stream.last_use = clock_;
      return stream.bytes;
    }
  }
  Stream& oldest = *std::min_element(streams_.begin(), streams_.end(),
                                     [](const Stream& a, const Stream& b) { return a.last_use < b.last_use; });
  oldest = {sector + sectors, bytes, clock_, write};
  return bytes;
}

}  // namespace pcached::cache
