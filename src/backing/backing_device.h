// The slow device behind the cache: a block device or a regular file, opened exclusively with
// O_DIRECT where the filesystem allows it. All I/O goes through the caller's ring (each queue
// thread and the writeback worker have their own), so no call here blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/unique_fd.h"
#include "format/superblock.h"
#include "io/ring.h"
#include "pcached/status.h"

namespace pcached::backing {

// Makes the backing device misbehave, for tests: the next `count` operations of a kind (or all
// of them while `count` is negative) fail with `error`, or, with `short_io`, move half the bytes.
// `delay_us` holds up every submission of the kind that long (a slow device, latency spikes): the
// submitting thread waits, as it would behind a full device queue.
struct FaultRule {
  std::atomic<int64_t> count{0};
  std::atomic<int> error{EIO};
  std::atomic<bool> short_io{false};
  std::atomic<uint32_t> delay_us{0};
  bool take();  // consumes one fault if the rule is armed
};

struct FaultInjection {
  FaultRule reads;
  FaultRule writes;
  FaultRule flushes;
  FaultRule discards;
  std::atomic<uint64_t> injected{0};
};

class BackingDevice {
 public:
  static Result<std::unique_ptr<BackingDevice>> open(const std::string& path);
  ~BackingDevice();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  uint32_t logical_block_size() const { return logical_block_size_; }
  bool direct_io() const { return direct_io_; }
  // What the superblock records to recognise this device again.
  format::BackingRecord record() const { return record_; }

  // Asynchronous I/O on the caller's ring; offsets and lengths are multiples of the logical block
  // size and buffers are aligned to it (O_DIRECT).
  void read(io::Ring& ring, void* buffer, uint64_t offset, uint32_t len, io::CompletionHandler* handler);
  void write(io::Ring& ring, const void* buffer, uint64_t offset, uint32_t len, io::CompletionHandler* handler);
  void flush(io::Ring& ring, io::CompletionHandler* handler);
  // Deallocates (discard) or zeroes a range; both may be unsupported (-EOPNOTSUPP).
  void discard(io::Ring& ring, uint64_t offset, uint64_t len, io::CompletionHandler* handler);

  FaultInjection& faults() { return faults_; }

 private:
  BackingDevice() = default;
  // Replaces a submission by an injected failure when a rule says so.
  bool inject(io::Ring& ring, FaultRule& rule, io::CompletionHandler* handler);

  std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
  uint32_t logical_block_size_ = 512;
  bool direct_io_ = false;
  format::BackingRecord record_;
  FaultInjection faults_;
};

}  // namespace pcached::backing
