// Attaching a cache whose region holds anything: Cache::open must either attach or refuse with a
// Status, never crash, hang or trip a sanitizer. Covers superblock choice and repair, control
// slot choice, segment headers, journal replay (links, torn and damaged key sets) and the checks
// on replayed keys; optionally reads through a queue from what was replayed, and writes all of it
// back and detaches (writeback, journal reclaim and GC over what replay accepted).
//
// An input patches a valid image (cache_image.h) of a cache abandoned with dirty data:
//   [flags] then patches: [area] [offset, u16 LE] [length] [length bytes] ...
//   flags bit 0: reseal every checksum after patching (the fuzzer then gets behind the CRCs)
//   flags bit 1: if the cache attaches, read the image's written ranges through a queue
//   flags bit 2: if the cache attaches, flush_all() and detach (each may refuse, not hang)
//   area: see patch_area() (superblock copies, control slots, the head of each segment); the
//   offset wraps within the area, bytes past its end are dropped.
// PCACHED_FUZZ_WRITE_SEEDS=<dir> writes the seed corpus to <dir>/engine_open and exits.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "format/control_area.h"
#include "format/crc32c.h"
#include "format/endian.h"
#include "format/key_set.h"
#include "frontend/sync_queue.h"
#include "fuzz/cache_image.h"
#include "fuzz/fuzz_support.h"
#include "support/scratch_file.h"

using namespace pcached;

namespace {

struct Fixture {
  testing::ScratchFile region{fuzz::kRegionBytes};
  testing::ScratchFile backing{fuzz::kBackingBytes};
  std::byte* image = nullptr;  // the region file, mapped shared: what the engine opens
  std::vector<std::byte> pristine;  // what to restore between runs: the head, then each segment window
};

Fixture* fixture = nullptr;
// PCACHED_FUZZ_VERBOSE=1: print what open made of each input (to see what a seed exercises).
bool verbose = false;

constexpr uint64_t kHeadBytes = format::kControlOffsets[1] + format::kBlockSize;

void restore() {
  const std::byte* from = fixture->pristine.data();
  std::memcpy(fixture->image, from, kHeadBytes);
  from += kHeadBytes;
  for (uint32_t segment = 0; segment < fuzz::kSegments; ++segment) {
    std::memcpy(fixture->image + format::kDataStart + segment * fuzz::kSegmentSize, from, fuzz::kSegmentWindow);
    from += fuzz::kSegmentWindow;
  }
}

void keep_pristine() {
  fixture->pristine.assign(fixture->image, fixture->image + kHeadBytes);
  for (uint32_t segment = 0; segment < fuzz::kSegments; ++segment) {
    const std::byte* window = fixture->image + format::kDataStart + segment * fuzz::kSegmentSize;
    fixture->pristine.insert(fixture->pristine.end(), window, window + fuzz::kSegmentWindow);
  }
}

void apply_patches(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (at + 4 <= size) {
    const fuzz::PatchArea area = fuzz::patch_area(data[at]);
    const uint64_t offset = (data[at + 1] | (uint64_t{data[at + 2]} << 8)) % area.length;
    size_t length = data[at + 3];
    at += 4;
    length = std::min({length, size - at, static_cast<size_t>(area.length - offset)});
    std::memcpy(fixture->image + area.offset + offset, data + at, length);
    at += length;
  }
}

void read_back(cache::Cache& cache) {
  auto queue = frontend::SyncQueue::create(cache);
  if (!queue.ok()) return;
  constexpr uint32_t kSectors = 64;
  std::unique_ptr<std::byte, decltype(&std::free)> buffer(
      static_cast<std::byte*>(std::aligned_alloc(4096, kSectors * 512)), &std::free);
  for (uint64_t sector : {0, 2048, 4096, 6144}) (void)queue.value()->read(sector, kSectors, buffer.get());
}

// Seeds: the image as it is, and each kind of damage the engine must tell apart.
class SeedWriter {
 public:
  explicit SeedWriter(const std::string& root) : directory_(root, "engine_open") {}
  struct Patch {
    uint8_t area;
    uint16_t offset;
    std::vector<uint8_t> bytes;
  };
  void write(const std::string& name, uint8_t flags, const std::vector<Patch>& patches) const {
    fuzz::InputBuilder input;
    input.u8(flags);
    for (const Patch& p : patches) {
      input.u8(p.area).u8(static_cast<uint8_t>(p.offset)).u8(static_cast<uint8_t>(p.offset >> 8));
      input.u8(static_cast<uint8_t>(p.bytes.size())).bytes(std::as_bytes(std::span(p.bytes)));
    }
    directory_.write(name, input.data());
  }

 private:
  fuzz::SeedDirectory directory_;
};

std::vector<uint8_t> le32(uint32_t value) {
  return {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8), static_cast<uint8_t>(value >> 16),
          static_cast<uint8_t>(value >> 24)};
}

void write_seeds(const std::string& directory) {
  // Where the image's journal and its key sets are.
  auto control = format::decode_control_area(
      std::span<const std::byte, format::kControlSlotBytes>(fixture->image + format::kControlOffsets[0], format::kControlSlotBytes),
      format::crc32c(0, fixture->image + 24, 16));
  if (!control.ok()) std::abort();
  const format::JournalHead head = control->journals[0];
  const uint8_t journal_area = static_cast<uint8_t>(4 + head.segment);
  std::vector<uint16_t> key_sets;
  for (uint64_t offset = format::kSegmentHeaderSize;;) {
    const std::byte* at = fixture->image + format::kDataStart + head.segment * fuzz::kSegmentSize + offset;
    if (format::load_le<uint32_t>(at) != format::kKeySetMagic) break;
    key_sets.push_back(static_cast<uint16_t>(offset));
    const uint16_t count = format::load_le<uint16_t>(at + 12);
    offset += format::encoded_key_set_size(count);
  }
  if (key_sets.size() < 4) std::abort();
  const uint16_t end = static_cast<uint16_t>(key_sets.back() + format::encoded_key_set_size(1));
  const uint32_t free_segment = fuzz::kSegments - 1;  // the image uses a few segments from the first on
  if (head.segment == free_segment) std::abort();

  SeedWriter seeds(directory);
  seeds.write("pristine", 0, {});
  seeds.write("pristine-read", 2, {});
  seeds.write("resealed-read", 3, {});
  seeds.write("pristine-flush-detach", 4, {});
  seeds.write("resealed-read-flush-detach", 7, {});
  seeds.write("superblock0-damaged", 0, {{0, 40, {0xa5}}});
  seeds.write("superblocks-both-damaged", 0, {{0, 40, {0xa5}}, {1, 60, {0x5a}}});
  seeds.write("superblock0-blank", 0, {{0, 0, std::vector<uint8_t>(255, 0)}, {0, 255, {0}}});
  seeds.write("superblock0-newer", 1, {{0, 8, le32(2)}});
  seeds.write("superblocks-disagree", 1, {{1, 68, le32(1)}});
  seeds.write("superblock-too-many-segments", 1, {{0, 64, le32(9999)}, {1, 64, le32(9999)}});
  seeds.write("control0-damaged", 0, {{2, 20, {0xff}}});
  seeds.write("control-both-damaged", 0, {{2, 20, {0xff}}, {3, 20, {0xff}}});
  seeds.write("control-clean-shutdown", 3, {{2, 12, le32(1)}, {3, 12, le32(1)}});
  seeds.write("control-horizon-above-keys", 1, {{2, 24, le32(1000)}, {2, 32, le32(1000)}});
  seeds.write("control-head-wrong-segment", 1, {{2, 48, le32(free_segment)}, {3, 48, le32(free_segment)}});
  seeds.write("control-second-journal", 1, {{2, 56, le32(head.segment)}, {2, 60, le32(head.generation)}});
  seeds.write("journal-header-damaged", 0, {{journal_area, 12, {0x77}}});
  seeds.write("keyset-first-damaged", 0, {{journal_area, uint16_t(key_sets[0] + 40), {0x33}}});
  seeds.write("keyset-last-torn", 0, {{journal_area, uint16_t(key_sets.back() + 40), {0x33}}});
  seeds.write("keyset-count-wrong", 1, {{journal_area, uint16_t(key_sets[1] + 12), {0x02, 0x00}}});
  seeds.write("keyset-older-generation", 1, {{journal_area, uint16_t(key_sets[2] + 8), le32(head.generation - 1)}});
  seeds.write("key-outside-segment", 1, {{journal_area, uint16_t(key_sets[0] + 32 + 20), le32(0x7fff0)}});
  seeds.write("key-wrong-generation", 1, {{journal_area, uint16_t(key_sets[0] + 32 + 24), le32(77)}});
  seeds.write("key-beyond-backing", 3, {{journal_area, uint16_t(key_sets[3] + 32), {0, 0, 0, 0, 0, 0, 0x10, 0}}});
  seeds.write("key-zero-kind", 3, {{journal_area, uint16_t(key_sets[0] + 32 + 31), {0x20}}});
  // A link at the journal's end to a fresh journal segment, and that segment's header.
  std::vector<uint8_t> link = le32(format::kKeySetMagic);
  for (auto part : {le32(0), le32(head.generation), {0, 0, 2, 0}, le32(0), le32(0), le32(free_segment), le32(1)}) {
    link.insert(link.end(), part.begin(), part.end());
  }
  std::vector<uint8_t> header = le32(format::kSegmentMagic);
  for (auto part : {le32(0), le32(2), le32(1), le32(free_segment), le32(0)}) header.insert(header.end(), part.begin(), part.end());
  seeds.write("journal-link", 3, {{journal_area, end, link}, {uint8_t(4 + free_segment), 0, header}});
  seeds.write("journal-link-flush-detach", 7, {{journal_area, end, link}, {uint8_t(4 + free_segment), 0, header}});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  verbose = std::getenv("PCACHED_FUZZ_VERBOSE") != nullptr;
  ::setenv("PMEM2_FORCE_GRANULARITY", "CACHE_LINE", 1);
  fixture = new Fixture;
  if (Status status = fuzz::build_image(fixture->region.path(), fixture->backing.path()); !status.ok()) {
    std::fprintf(stderr, "engine_open_fuzz: cannot build the image: %s\n", status.message().c_str());
    std::abort();
  }
  const int fd = ::open(fixture->region.path().c_str(), O_RDWR | O_CLOEXEC);
  void* mapped = ::mmap(nullptr, fuzz::kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) std::abort();
  fixture->image = static_cast<std::byte*>(mapped);
  keep_pristine();
  if (const char* directory = fuzz::seed_request()) {
    write_seeds(directory);
    delete fixture;
    std::exit(0);
  }
  // Removes the scratch files when libFuzzer exits normally.
  std::atexit([] { delete fixture; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  restore();
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  apply_patches(data + 1, size - 1);
  if (flags & 1) fuzz::reseal(std::span(fixture->image, fuzz::kRegionBytes));

  auto cache = cache::Cache::open(fuzz::image_options(fixture->region.path(), fixture->backing.path()));
  if (verbose) std::fprintf(stderr, "open: %s\n", cache.ok() ? "attached" : cache.status().message().c_str());
  if (!cache.ok()) {
    FUZZ_CHECK(!cache.status().message().empty());  // a refusal says why
    return 0;
  }
  if (flags & 2) read_back(*cache.value());
  if (flags & 4) {
    const Status flushed = cache.value()->flush_all();
    FUZZ_CHECK(flushed.ok() || !flushed.message().empty());
    const Status detached = cache.value()->detach(/*force=*/false);
    FUZZ_CHECK(detached.ok() || !detached.message().empty());
    if (!detached.ok()) cache.value()->abandon();
    return 0;
  }
  cache.value()->abandon();
  return 0;
}
