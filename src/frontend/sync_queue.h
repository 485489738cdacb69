// The in-process frontend: a cache queue driven by the calling thread, one request at a time.
// Tests and benchmarks use it in place of the ublk server; each thread that issues I/O owns one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/ring.h"
#include "pcached/cache.h"

namespace pcached::frontend {

class SyncQueue {
 public:
  static Result<std::unique_ptr<SyncQueue>> create(cache::Cache& cache);

  // Each returns what the engine completed the request with: bytes, 0, or a negative errno.
  int read(uint64_t sector, uint32_t sectors, std::byte* buffer);
  int write(uint64_t sector, uint32_t sectors, const std::byte* buffer);
  int discard(uint64_t sector, uint32_t sectors);
  int write_zeroes(uint64_t sector, uint32_t sectors);
  int flush();
  int execute(const cache::Request& request);

  // Submits the requests as one batch (as the ublk frontend does with the requests of one
  // wake-up) and returns their results; none may complete before the batch ends.
  std::vector<int> execute_batch(const std::vector<cache::Request>& requests);

 private:
  SyncQueue() = default;

  std::unique_ptr<io::Ring> ring_;  // outlives the queue, whose I/O it carries
  std::unique_ptr<cache::CacheQueue> queue_;
};

}  // namespace pcached::frontend
