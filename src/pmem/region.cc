#include "pcached/pmem_region.h"

#include <fcntl.h>
#include <libpmem2.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/unique_fd.h"
#include "pmem/badblocks.h"
#include "pmem/pmem2_errors.h"
#include "pmem/media_read.h"
#include "pmem/memory_failure.h"

namespace pcached::pmem {

namespace {

constexpr uint64_t kPageSize = 4096;

const char* const kWhatARegionIs =
    "a pmem region is a devdax device (/dev/daxX.Y), a file on a filesystem mounted with -o dax, "
    "or a plain file for tests";

Status region_error(const std::string& path, int code, const std::string& reason) {
  return Status::error(code, "pmem region " + path + ": " + reason);
}

Status pmem2_failure(const std::string& path, const char* step, int rc) {
  return region_error(path, errno_from_pmem2(rc), std::string(step) + ": " + pmem2_errormsg());
}

struct SourceDeleter {
  void operator()(pmem2_source* source) const { pmem2_source_delete(&source); }
};
struct ConfigDeleter {
  void operator()(pmem2_config* config) const { pmem2_config_delete(&config); }
};
struct MapDeleter {
  void operator()(pmem2_map* map) const { pmem2_map_delete(&map); }
};

Granularity from_pmem2(pmem2_granularity granularity) {
  switch (granularity) {
    case PMEM2_GRANULARITY_BYTE:
      return Granularity::Byte;
    case PMEM2_GRANULARITY_CACHE_LINE:
      return Granularity::CacheLine;
    case PMEM2_GRANULARITY_PAGE:
      break;
  }
  return Granularity::Page;
}

// Checks what stat() can tell before we open anything, so that the common mistakes get a message
// that says what was wrong instead of what libpmem2 tripped over.
Status check_path_kind(const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return region_error(path, EISDIR, std::string("is a directory; ") + kWhatARegionIs);
  if (S_ISBLK(st.st_mode)) {
    return region_error(path, ENOTSUP,
                        std::string("is a block device, which cannot be mapped with DAX; use the devdax "
                                    "namespace (ndctl create-namespace -m devdax) or a file on the fsdax "
                                    "filesystem; ") +
                            kWhatARegionIs);
  }
  if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
    return region_error(path, EINVAL, std::string("is neither a regular file nor a character device; ") + kWhatARegionIs);
  }
  if (S_ISREG(st.st_mode) && (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return region_error(path, EROFS,
                        std::string("is read-only (mode ") + mode + "); a cache region must be writable");
  }
  return Status();
}

// Page tables of a file mapping fill in on first touch, one 4 KiB fault at a time, which would
// land on the I/O path (devdax maps with 2 MiB pages and needs none of this). Populating them at
// open moves that cost out of the way; older kernels without MADV_POPULATE_WRITE just skip it.
void prefault(const Region& region) {
#ifdef MADV_POPULATE_WRITE
  const auto start = std::chrono::steady_clock::now();
  if (::madvise(region.base(), region.size(), MADV_POPULATE_WRITE) == 0) {
    spdlog::debug("pmem region {}: page tables populated in {:.0f} ms", region.path(),
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
#else
  (void)region;
#endif
}

}  // namespace

const char* to_string(Granularity granularity) {
  switch (granularity) {
    case Granularity::Byte:
      return "byte";
    case Granularity::CacheLine:
      return "cache-line";
    case Granularity::Page:
      return "page";
  }
  return "unknown";
}

const char* to_string(RegionKind kind) { return kind == RegionKind::DevDax ? "devdax" : "file"; }

Result<std::unique_ptr<Region>> Region::open(const RegionOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return Status::error(EINVAL, "pmem region: no path given");

  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return region_error(path, errno, std::strerror(errno));
  if (Status kind = check_path_kind(path, st); !kind.ok()) return kind;

  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == EACCES || err == EROFS || err == EPERM) {
      return region_error(path, err, std::string("cannot open for writing: ") + std::strerror(err));
    }
    return region_error(path, err, std::strerror(err));
  }

  pmem2_source* raw_source = nullptr;
  if (int rc = pmem2_source_from_fd(&raw_source, fd.get()); rc != 0) {
    if (rc == PMEM2_E_INVALID_FILE_TYPE) {
      return region_error(path, ENOTSUP, std::string("is a character device but not a devdax device; ") + kWhatARegionIs);
    }
    return pmem2_failure(path, "cannot use as a pmem source", rc);
  }
  std::unique_ptr<pmem2_source, SourceDeleter> source(raw_source);

  size_t size = 0;
  if (int rc = pmem2_source_size(source.get(), &size); rc != 0) return pmem2_failure(path, "cannot read size", rc);
  size_t alignment = 0;
  if (int rc = pmem2_source_alignment(source.get(), &alignment); rc != 0) {
    return pmem2_failure(path, "cannot read alignment", rc);
  }
  alignment = std::max<size_t>(alignment, kPageSize);

  if (size < options.min_size) {
    return region_error(path, ENOSPC,
                        "is " + format_size(size) + "; a pmem region must be at least " + format_size(options.min_size));
  }
  if (size % alignment != 0) {
    return region_error(path, EINVAL,
                        "size " + std::to_string(size) + " is not a multiple of the region's alignment (" +
                            format_size(alignment) + ")");
  }

  pmem2_config* raw_config = nullptr;
  if (int rc = pmem2_config_new(&raw_config); rc != 0) return pmem2_failure(path, "cannot create a mapping config", rc);
  std::unique_ptr<pmem2_config, ConfigDeleter> config(raw_config);
  // Ask for the weakest granularity so the mapping always succeeds; we decide below whether the
  // granularity we got is acceptable, with a message of our own.
  if (int rc = pmem2_config_set_required_store_granularity(config.get(), PMEM2_GRANULARITY_PAGE); rc != 0) {
    return pmem2_failure(path, "cannot configure the mapping", rc);
  }

  pmem2_map* raw_map = nullptr;
  if (int rc = pmem2_map_new(&raw_map, config.get(), source.get()); rc != 0) return pmem2_failure(path, "cannot map", rc);
  std::unique_ptr<pmem2_map, MapDeleter> map(raw_map);

  const Granularity granularity = from_pmem2(pmem2_map_get_store_granularity(map.get()));
  if (granularity == Granularity::Page) {
    if (!options.allow_volatile) {
      return region_error(path, ENOTSUP,
                          "is not DAX-capable persistent memory: libpmem2 maps it with page granularity, so "
                          "stores survive a power loss only through msync; use a devdax device or a file on a "
                          "filesystem mounted with -o dax, or allow a volatile/test region explicitly");
    }
    spdlog::warn(
        "pmem region {}: VOLATILE/TEST region (page granularity, not DAX): persistence goes through msync and "
        "nothing here is fit for production data",
        path);
  }

  auto region = std::unique_ptr<Region>(new Region());
  region->identity_.kind = S_ISCHR(st.st_mode) ? RegionKind::DevDax : RegionKind::File;
  region->identity_.device = S_ISCHR(st.st_mode) ? st.st_rdev : st.st_dev;
  region->identity_.inode = S_ISCHR(st.st_mode) ? 0 : st.st_ino;
  region->identity_.size = size;
  region->identity_.path = path;
  region->size_ = size;
  region->alignment_ = alignment;
  region->granularity_ = granularity;
  region->base_ = static_cast<std::byte*>(pmem2_map_get_address(map.get()));
  if (pmem2_source_numa_node(source.get(), &region->numa_node_) != 0) region->numa_node_ = -1;

  Result<std::vector<BadRange>> badblocks = read_badblocks(source.get());
  if (badblocks.ok()) {
    region->bad_ranges_ = std::move(badblocks.value());
    if (!region->bad_ranges_.empty()) {
      region->has_bad_ranges_.store(true);
      spdlog::warn("pmem region {}: {} bad range(s) reported by the platform; reads there fail with EIO", path,
                   region->bad_ranges_.size());
    }
  } else {
    spdlog::warn("pmem region {}: {}; media errors will be found only when a read faults", path,
                 badblocks.status().message());
  }
  for (const BadRange& range : options.injected_bad_ranges) region->mark_bad(range.offset, range.length);

  if (region->identity_.kind == RegionKind::File) prefault(*region);

  region->map_ = map.release();
  region->fd_ = fd.release();
  track_region(*region);
  spdlog::info("pmem region {}: {} {}, {} granularity, alignment {}", path, to_string(region->identity_.kind),
               format_size(size), to_string(granularity), format_size(alignment));
  return region;
}

Region::~Region() {
  untrack_region(*this);
  if (map_ != nullptr) pmem2_map_delete(&map_);
  UniqueFd closer(fd_);
}

Status Region::read(uint64_t offset, void* dst, size_t len) const {
  if (offset > size_ || len > size_ - offset) {
    return Status::error(EINVAL, "pmem region " + path() + ": read of " + std::to_string(len) + " bytes at offset " +
                                     std::to_string(offset) + " is outside the region");
  }
  if (overlaps_bad_range(offset, len)) {
    media_errors_.fetch_add(1, std::memory_order_relaxed);
    return Status::error(EIO, "pmem region " + path() + ": read at offset " + std::to_string(offset) +
                                  " overlaps a known bad block");
  }
  const void* fault = nullptr;
  if (guarded_copy(dst, base_ + offset, len, &fault)) return Status();

  const uint64_t fault_offset = static_cast<uint64_t>(static_cast<const std::byte*>(fault) - base_);
  const uint64_t page = fault_offset & ~(kPageSize - 1);
  mark_bad(page, std::min<uint64_t>(kPageSize, size_ - page));
  media_errors_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("pmem region {}: media error at offset {} (read of {} bytes at {}); page marked bad", path(),
                fault_offset, len, offset);
  return Status::error(EIO, "pmem region " + path() + ": media error at offset " + std::to_string(fault_offset));
}

void Region::record_memory_failure(uint64_t offset, uint64_t len) const {
  mark_bad(offset, len);
  media_errors_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("pmem region {}: memory failure reported at offset {} ({} bytes); marked bad", path(), offset, len);
}

std::vector<BadRange> Region::bad_ranges() const {
  std::lock_guard lock(bad_mutex_);
  return bad_ranges_;
}

bool Region::overlaps_bad_range(uint64_t offset, uint64_t len) const {
  // Fast path for the common case of healthy media: one relaxed load, no lock.
  if (!has_bad_ranges_.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(bad_mutex_);
  auto it = std::upper_bound(bad_ranges_.begin(), bad_ranges_.end(), offset,
                             [](uint64_t value, const BadRange& range) { return value < range.offset; });
  if (it != bad_ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->offset + prev->length > offset) return true;
  }
  return it != bad_ranges_.end() && it->offset < offset + len;
}

void Region::mark_bad(uint64_t offset, uint64_t len) const {
  std::lock_guard lock(bad_mutex_);
  add_bad_range(bad_ranges_, {offset, len});
  has_bad_ranges_.store(true, std::memory_order_release);
}

}  // namespace pcached::pmem
