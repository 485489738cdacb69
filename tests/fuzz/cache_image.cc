#include "fuzz/cache_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backing/backing_device.h"
#include "format/crc32c.h"
#include "format/endian.h"
#include "format/key_set.h"
#include "format/segment_header.h"
#include "format/superblock.h"
#include "frontend/sync_queue.h"

namespace pcached::fuzz {

namespace {

constexpr std::array<uint8_t, 16> kFixedUuid = {0x70, 0x63, 0x61, 0x63, 0x68, 0x65, 0x64, 0x2d,
                                                0x66, 0x75, 0x7a, 0x7a, 0x69, 0x6e, 0x67, 0x31};

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

AlignedBuffer sectors_of(uint64_t write_id, uint32_t sectors) {
  AlignedBuffer buffer(static_cast<std::byte*>(std::aligned_alloc(4096, (sectors * 512 + 4095) / 4096 * 4096)));
  for (uint32_t i = 0; i < sectors * 512; ++i) buffer.get()[i] = static_cast<std::byte>(write_id * 31 + i / 512);
  return buffer;
}

// The requests the image holds the keys of: plain writes, an overwrite, a batch (one key set of
// several keys), write-zeroes and a discard.
Status write_requests(cache::Cache& cache) {
  auto queue = frontend::SyncQueue::create(cache);
  if (!queue.ok()) return queue.status();
  auto check = [](int result, const char* what) {
    return result < 0 ? Status::error(-result, std::string("building the fuzz image: ") + what) : Status();
  };
  for (uint64_t i = 0; i < 8; ++i) {
    const auto data = sectors_of(i + 1, 8);
    if (Status s = check(queue.value()->write(i * 64, 8, data.get()), "write"); !s.ok()) return s;
  }
  const auto big = sectors_of(20, 64);
  if (Status s = check(queue.value()->write(2048, 64, big.get()), "write"); !s.ok()) return s;
  const auto over = sectors_of(21, 4);
  if (Status s = check(queue.value()->write(2, 4, over.get()), "overwrite"); !s.ok()) return s;
  std::vector<AlignedBuffer> batch_data;
  std::vector<cache::Request> batch;
  for (uint64_t i = 0; i < 4; ++i) {
    batch_data.push_back(sectors_of(30 + i, 8));
    batch.push_back({cache::Op::Write, 4096 + i * 16, 8, batch_data.back().get(), false});
  }
  for (int result : queue.value()->execute_batch(batch)) {
    if (Status s = check(result, "batch write"); !s.ok()) return s;
  }
  if (Status s = check(queue.value()->write_zeroes(6144, 32), "write-zeroes"); !s.ok()) return s;
  if (Status s = check(queue.value()->discard(64, 8), "discard"); !s.ok()) return s;
  return Status();
}

}  // namespace

cache::CacheOptions image_options(const std::string& region_path, const std::string& backing_path) {
  cache::CacheOptions options;
  options.region_path = region_path;
  options.backing_path = backing_path;
  options.force = true;
  options.segment_size = kSegmentSize;
  options.copy_policy.spec = pmem::parse_policy_spec("nt").value();
  options.tunables.read_miss_fill = false;  // reads of the fuzzer must not write the region
  options.allow_volatile_writeback = true;  // a /dev/shm file stands in for pmem
  options.commit_shared_fence_classes = 0b111000;  // not measured at every open: 4-16 KiB share
  return options;
}

Status build_image(const std::string& region_path, const std::string& backing_path) {
  {
    cache::CacheOptions options = image_options(region_path, backing_path);
    options.format = true;
    auto cache = cache::Cache::open(options);
    if (!cache.ok()) return cache.status();
    cache.value()->backing_faults().writes.count = -1;  // keep every key dirty
    if (Status status = write_requests(*cache.value()); !status.ok()) return status;
    cache.value()->abandon();
  }

  const int fd = ::open(region_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::error(errno, "cannot open " + region_path);
  void* mapped = ::mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) return Status::error(errno, "cannot map " + region_path);
  const std::span image(static_cast<std::byte*>(mapped), kRegionBytes);

  std::span<std::byte, format::kSuperblockSize> copy0(image.data(), format::kSuperblockSize);
  auto superblock = format::decode_superblock(copy0);
  if (!superblock.ok()) return superblock.status();
  format::Superblock fixed = superblock.value();
  fixed.uuid = kFixedUuid;
  fixed.created_unix = 0;
  fixed.backing.device = 0;
  fixed.backing.inode = 0;
  for (uint64_t offset : format::kSuperblockOffsets) {
    format::encode_superblock(fixed, std::span<std::byte, format::kSuperblockSize>(image.data() + offset,
                                                                                   format::kSuperblockSize));
  }
  reseal(image);
  ::munmap(mapped, kRegionBytes);
  return Status();
}

void reseal(std::span<std::byte> image) {
  using format::load_le;
  using format::store_le;
  std::byte* const base = image.data();

  for (uint64_t offset : format::kSuperblockOffsets) {
    std::byte* at = base + offset;
    if (std::memcmp(at, format::kSuperblockMagic, sizeof format::kSuperblockMagic) != 0) continue;
    store_le<uint32_t>(at + 16, format::crc32c_skipping_field(0, at, format::kSuperblockSize, 16));
  }
  // The engine goes by copy 0 when it decodes, else copy 1; their UUIDs seed every other CRC.
  const bool copy0 = std::memcmp(base, format::kSuperblockMagic, sizeof format::kSuperblockMagic) == 0;
  const uint32_t salt = format::crc32c(0, base + format::kSuperblockOffsets[copy0 ? 0 : 1] + 24, 16);

  for (uint64_t offset : format::kControlOffsets) {
    std::byte* at = base + offset;
    if (load_le<uint32_t>(at) != format::kControlMagic) continue;
    store_le<uint32_t>(at + 4, format::crc32c_skipping_field(salt, at, format::kControlSize, 4));
  }

  for (uint32_t segment = 0; segment < kSegments; ++segment) {
    std::byte* at = base + format::kDataStart + segment * kSegmentSize;
    if (load_le<uint32_t>(at) != format::kSegmentMagic) continue;
    store_le<uint32_t>(at + 4, format::crc32c_skipping_field(salt, at, format::kSegmentHeaderEncodedSize, 4));
    if (load_le<uint32_t>(at + 8) != static_cast<uint32_t>(format::SegmentType::Journal)) continue;
    uint64_t offset = format::kSegmentHeaderSize;
    while (offset + format::kKeySetHeaderSize <= kSegmentWindow) {
      std::byte* record = at + offset;
      const uint16_t count = load_le<uint16_t>(record + 12);
      const uint16_t kind = load_le<uint16_t>(record + 14);
      const bool keys = format::holds_keys(static_cast<format::KeySetKind>(kind)) && count >= 1 &&
                        count <= format::kMaxKeysPerSet;
      const bool link = kind == static_cast<uint16_t>(format::KeySetKind::Link);
      const size_t n = keys ? count : 0;
      if (load_le<uint32_t>(record) != format::kKeySetMagic || !(keys || link) ||
          offset + format::encoded_key_set_size(n) > kSegmentWindow) {
        offset += format::kKeySetAlignment;
        continue;
      }
      store_le<uint32_t>(record + 4, format::crc32c_skipping_field(salt, record, format::kKeySetHeaderSize +
                                                                                      n * format::kKeySize, 4));
      offset += format::encoded_key_set_size(n);
    }
  }
}

PatchArea patch_area(uint8_t selector) {
  switch (selector % (4 + kSegments)) {
    case 0: return {format::kSuperblockOffsets[0], format::kSuperblockSize};
    case 1: return {format::kSuperblockOffsets[1], format::kSuperblockSize};
    case 2: return {format::kControlOffsets[0], format::kControlSlotBytes};
    case 3: return {format::kControlOffsets[1], format::kControlSlotBytes};
    default: return {format::kDataStart + (selector % (4 + kSegments) - 4) * kSegmentSize, kSegmentWindow};
  }
}

}  // namespace pcached::fuzz
