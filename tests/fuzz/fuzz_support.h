// What the fuzz targets share: reading fixed fields off the front of an input, and writing seeds.
// Each target writes its own seed corpus (it knows its input layout best):
//   PCACHED_FUZZ_WRITE_SEEDS=<dir> <target>_fuzz   writes <dir>/<target>/<seed> files and exits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace pcached::fuzz {

// Consumes an input front to back; fields past its end read as zero.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t u32() {
    uint32_t value = 0;
    for (unsigned i = 0; i < 4; ++i) value |= uint32_t{u8()} << (8 * i);
    return value;
  }
  // The next n bytes, zero-filled past the end of the input.
  void bytes(std::byte* out, size_t n) {
    const size_t available = std::min(n, size_ - at_);
    std::memcpy(out, data_ + at_, available);
    std::memset(out + available, 0, n - available);
    at_ += available;
  }
  std::span<const std::byte> rest() const {
    return {reinterpret_cast<const std::byte*>(data_) + at_, size_ - at_};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// Builds inputs in the layout InputReader reads.
class InputBuilder {
 public:
  InputBuilder& u8(uint8_t value) {
    bytes_.push_back(value);
    return *this;
  }
  InputBuilder& u32(uint32_t value) {
    for (unsigned i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(value >> (8 * i)));
    return *this;
  }
  InputBuilder& bytes(std::span<const std::byte> data) {
    for (std::byte b : data) bytes_.push_back(static_cast<uint8_t>(b));
    return *this;
  }
  const std::vector<uint8_t>& data() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Where seeds go, if this run is to write them instead of fuzzing.
inline const char* seed_request() { return std::getenv("PCACHED_FUZZ_WRITE_SEEDS"); }

class SeedDirectory {
 public:
  SeedDirectory(const std::string& root, const std::string& target) : directory_(root + "/" + target) {
    std::filesystem::create_directories(directory_);
  }
  void write(const std::string& name, std::span<const uint8_t> input) const {
    std::ofstream(directory_ + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size()));
  }
  void write(const std::string& name, const std::string& text) const {
    write(name, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }

 private:
  std::string directory_;
};

// A failed property: libFuzzer reports the abort with the input that caused it.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "property failed: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(condition) \
  do {                        \
    if (!(condition)) ::pcached::fuzz::property_failed(#condition); \
  } while (0)

}  // namespace pcached::fuzz

// Defines LLVMFuzzerInitialize for a target whose only set-up is its seed writer: with
// PCACHED_FUZZ_WRITE_SEEDS set, write_seeds(root) writes the seeds and the process exits.
#define PCACHED_FUZZ_SEEDS_FROM(write_seeds)                \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {     \
    if (const char* root = ::pcached::fuzz::seed_request()) { \
      write_seeds(root);                                    \
      std::exit(0);                                         \
    }                                                       \
    return 0;                                               \
  }
