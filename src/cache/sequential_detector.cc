#include "cache/sequential_detector.h"

#include "format/layout.h"

namespace pcached::cache {

uint64_t SequentialDetector::observe(bool write, uint64_t sector, uint32_t sectors) {
  ++clock_;
  const uint64_t bytes = uint64_t{sectors} * format::kSectorSize;
  // One pass finds the stream this request continues and, should there be none (every random
  // request), the least recently continued one, which the new stream replaces.
  Stream* oldest = &streams_[0];
  for (Stream& stream : streams_) {
    if (stream.next_sector == sector && stream.write == write) {
      stream.next_sector = sector + sectors;
      stream.bytes += bytes;
      stream.last_use = clock_;
      return stream.bytes;
    }
    if (stream.last_use < oldest->last_use) oldest = &stream;
  }
  *oldest = {sector + sectors, bytes, clock_, write};
  return bytes;
}

}  // namespace pcached::cache
