#include "backing/backing_device.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pcached::backing {

namespace {

Status backing_error(const std::string& path, int code, const std::string& reason) {
  return Status::error(code, "backing device " + path + ": " + reason);
}

// The completion of an injected fault: a NOP whose result is replaced by the fault's errno.
class InjectedFailure final : public io::CompletionHandler {
 public:
  InjectedFailure(io::CompletionHandler* target, int error) : target_(target), error_(error) {}
  void on_completion(int) override {
    io::CompletionHandler* target = target_;
    const int error = error_;
    delete this;
    if (target != nullptr) target->on_completion(-error);
  }

 private:
  io::CompletionHandler* target_;
  int error_;
};

// The smallest alignment O_DIRECT accepts on this file: try 512, else assume 4096.
uint32_t probe_direct_alignment(int fd) {
  void* buffer = nullptr;
  if (posix_memalign(&buffer, 4096, 4096) != 0) return 4096;
  const ssize_t n = ::pread(fd, buffer, 512, 0);
  std::free(buffer);
  return n >= 0 ? 512 : 4096;
}

// A process that died with I/O in flight keeps its files open until the kernel has torn down its
// io_uring, which happens asynchronously: a restarted daemon waits a moment for that lock.
bool lock_exclusively(int fd) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The same wait for an exclusive open of a block device (EBUSY while the dead process's ring
// still holds it).
int open_retrying_busy(const std::string& path, int flags) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), flags);
    if (fd >= 0 || errno != EBUSY || attempt >= 100) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

bool FaultRule::take() {
  int64_t current = count.load(std::memory_order_relaxed);
  while (current != 0) {
    if (current < 0) return true;
    if (count.compare_exchange_weak(current, current - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

Result<std::unique_ptr<BackingDevice>> BackingDevice::open(const std::string& path) {
  if (path.empty()) return Status::error(EINVAL, "backing device: no path given");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return backing_error(path, errno, std::strerror(errno));
  const bool block = S_ISBLK(st.st_mode);
  if (!block && !S_ISREG(st.st_mode)) {
    return backing_error(path, EINVAL, "is neither a block device nor a regular file");
  }

  auto device = std::unique_ptr<BackingDevice>(new BackingDevice());
  device->path_ = path;
  // O_EXCL on a block device fails while it is mounted or held by another exclusive opener.
  const int base_flags = O_RDWR | O_CLOEXEC | (block ? O_EXCL : 0);
  device->fd_.reset(open_retrying_busy(path, base_flags | O_DIRECT));
  device->direct_io_ = device->fd_.valid();
  if (!device->fd_.valid() && errno == EINVAL) {
    // tmpfs and a few other filesystems refuse O_DIRECT; buffered I/O plus fsync is still correct.
    device->fd_.reset(open_retrying_busy(path, base_flags));
    if (device->fd_.valid()) spdlog::info("backing device {}: O_DIRECT not supported here, using buffered I/O", path);
  }
  if (!device->fd_.valid()) {
    const int err = errno;
    if (err == EBUSY) return backing_error(path, err, "is in use (mounted, or opened exclusively by another program)");
    return backing_error(path, err, std::string("cannot open for writing: ") + std::strerror(err));
  }
  if (!block && !lock_exclusively(device->fd_.get())) {
    return backing_error(path, EBUSY, "is in use by another pcached cache (file lock held)");
  }

  if (block) {
    uint64_t bytes = 0;
    int sector_size = 512;
    if (::ioctl(device->fd_.get(), BLKGETSIZE64, &bytes) != 0 || ::ioctl(device->fd_.get(), BLKSSZGET, &sector_size) != 0) {
      return backing_error(path, errno, std::string("cannot read its size: ") + std::strerror(errno));
    }
    device->size_ = bytes;
    device->logical_block_size_ = static_cast<uint32_t>(sector_size);
  } else {
    device->size_ = static_cast<uint64_t>(st.st_size);
    device->logical_block_size_ = device->direct_io_ ? probe_direct_alignment(device->fd_.get()) : 512;
  }
  if (device->size_ < device->logical_block_size_ || device->size_ % device->logical_block_size_ != 0) {
    return backing_error(path, EINVAL,
                         "size " + std::to_string(device->size_) + " is not a positive multiple of its block size " +
                             std::to_string(device->logical_block_size_));
  }
  device->record_.kind = block ? format::BackingKind::BlockDevice : format::BackingKind::File;
  device->record_.logical_block_size = device->logical_block_size_;
  device->record_.device = block ? st.st_rdev : st.st_dev;
  device->record_.inode = block ? 0 : st.st_ino;
  device->record_.size = device->size_;
  return device;
}

BackingDevice::~BackingDevice() = default;

bool BackingDevice::inject(io::Ring& ring, FaultRule& rule, io::CompletionHandler* handler) {
  if (const uint32_t delay = rule.delay_us.load(std::memory_order_relaxed); delay != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(delay));
  }
  if (!rule.take()) return false;
  if (rule.short_io.load(std::memory_order_relaxed)) return false;  // the caller halves the length
  faults_.injected.fetch_add(1, std::memory_order_relaxed);
  io_uring_prep_nop(ring.prepare(new InjectedFailure(handler, rule.error.load(std::memory_order_relaxed))));
  return true;
}

void BackingDevice::read(io::Ring& ring, void* buffer, uint64_t offset, uint32_t len, io::CompletionHandler* handler) {
  if (inject(ring, faults_.reads, handler)) return;
  if (faults_.reads.short_io.load(std::memory_order_relaxed) && len > logical_block_size_) len /= 2;
  io_uring_prep_read(ring.prepare(handler), fd_.get(), buffer, len, offset);
}

void BackingDevice::write(io::Ring& ring, const void* buffer, uint64_t offset, uint32_t len,
                          io::CompletionHandler* handler) {
  if (inject(ring, faults_.writes, handler)) return;
  if (faults_.writes.short_io.load(std::memory_order_relaxed) && len > logical_block_size_) len /= 2;
  io_uring_prep_write(ring.prepare(handler), fd_.get(), buffer, len, offset);
}

void BackingDevice::flush(io::Ring& ring, io::CompletionHandler* handler) {
  if (inject(ring, faults_.flushes, handler)) return;
  io_uring_prep_fsync(ring.prepare(handler), fd_.get(), IORING_FSYNC_DATASYNC);
}

void BackingDevice::discard(io::Ring& ring, uint64_t offset, uint64_t len, io::CompletionHandler* handler) {
  if (inject(ring, faults_.discards, handler)) return;
  io_uring_prep_fallocate(ring.prepare(handler), fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          static_cast<off_t>(offset), static_cast<off_t>(len));
}

}  // namespace pcached::backing
