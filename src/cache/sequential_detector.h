// Recognises sequential streams on one queue, so that a long one (a backup, a scan, a copy) can
// bypass the cache instead of flushing the hot data out of it. Like bcache's sequential_cutoff,
// it follows a few streams at once (interleaved readers and writers) and forgets the least
// recently continued one when a new stream starts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pcached::cache {

class SequentialDetector {
 public:
  // Records a request and returns the length in bytes of the stream it continues or starts,
  // this request included. Reads and writes are separate streams.
  uint64_t observe(bool write, uint64_t sector, uint32_t sectors);

 private:
  struct Stream {
    uint64_t next_sector = UINT64_MAX;  // where the stream continues
    uint64_t bytes = 0;
    uint64_t last_use = 0;
    bool write = false;
  };
  static constexpr size_t kStreams = 8;
  std::array<Stream, kStreams> streams_{};
  uint64_t clock_ = 0;
};

}  // namespace pcached::cache
