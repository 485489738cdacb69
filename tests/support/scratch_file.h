// Files on /dev/shm that stand in for pmem regions in tests, and the environment switch that makes
// libpmem2 take the real cache-flush paths on them.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "pcached/pmem_region.h"

namespace pcached::testing {

// A uniquely named file that is removed when the object goes away.
class ScratchFile {
 public:
  explicit ScratchFile(uint64_t size, const std::string& directory = "/dev/shm") {
    static std::atomic<unsigned> counter{0};
    path_ = directory + "/pcached-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) throw std::runtime_error("cannot create " + path_);
    ::close(fd);
  }
  ~ScratchFile() {
    ::chmod(path_.c_str(), 0600);
    ::unlink(path_.c_str());
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }
  void resize(uint64_t size) const {
    if (::truncate(path_.c_str(), static_cast<off_t>(size)) != 0) throw std::runtime_error("cannot resize " + path_);
  }

 private:
  std::string path_;
};

// Sets PMEM2_FORCE_GRANULARITY for the lifetime of the object (libpmem2 reads it at every
// pmem2_map_new); restores the previous value after.
class ForcedGranularity {
 public:
  explicit ForcedGranularity(const char* value) {
    if (const char* old = std::getenv(kName)) previous_ = old;
    if (value != nullptr) {
      ::setenv(kName, value, 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ~ForcedGranularity() {
    if (previous_) {
      ::setenv(kName, previous_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ForcedGranularity(const ForcedGranularity&) = delete;
  ForcedGranularity& operator=(const ForcedGranularity&) = delete;

 private:
  static constexpr const char* kName = "PMEM2_FORCE_GRANULARITY";
  std::optional<std::string> previous_;
};

// A file-backed region that takes the real flush paths (cache-line granularity).
struct EmulatedPmem {
  // CACHE_LINE: ADR pmem (flushes needed); BYTE: eADR (CPU caches are persistent).
  explicit EmulatedPmem(uint64_t size, const char* granularity = "CACHE_LINE") : file(size) {
    ForcedGranularity forced(granularity);
    pmem::RegionOptions options;
    options.path = file.path();
    options.min_size = 0;
    auto opened = pmem::Region::open(options);
    if (!opened.ok()) throw std::runtime_error(opened.status().message());
    region = std::move(opened.value());
  }
  ScratchFile file;
  std::unique_ptr<pmem::Region> region;
};

}  // namespace pcached::testing
