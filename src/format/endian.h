// Fixed little-endian encoding of on-media integers, whatever the host.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pcached::format {

template <typename T>
inline T byteswap_if_big(T value) {
  if constexpr (std::endian::native == std::endian::big) {
    T swapped = 0;
    for (size_t i = 0; i < sizeof(T); ++i) swapped = static_cast<T>((swapped << 8) | ((value >> (8 * i)) & 0xFF));
    return swapped;
  }
  return value;
}

template <typename T>
inline void store_le(std::byte* at, T value) {
  value = byteswap_if_big(value);
  std::memcpy(at, &value, sizeof value);
}

template <typename T>
inline T load_le(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return byteswap_if_big(value);
}

}  // namespace pcached::format

namespace pcached::format {

// Sequential field access over a fixed buffer; callers size the buffer from layout.h, so bounds
// are the encoder's and decoder's static responsibility (asserted in debug builds).
class FieldWriter {
 public:
  explicit FieldWriter(std::byte* base) : base_(base) {}
  template <typename T>
  FieldWriter& put(T value) {
    store_le(base_ + pos_, value);
    pos_ += sizeof(T);
    return *this;
  }
  FieldWriter& put_bytes(const void* data, size_t len) {
    std::memcpy(base_ + pos_, data, len);
    pos_ += len;
    return *this;
  }
  FieldWriter& skip(size_t len) {
    std::memset(base_ + pos_, 0, len);
    pos_ += len;
    return *this;
  }
  size_t position() const { return pos_; }

 private:
  std::byte* base_;
  size_t pos_ = 0;
};

class FieldReader {
 public:
  explicit FieldReader(const std::byte* base) : base_(base) {}
  template <typename T>
  T get() {
    const T value = load_le<T>(base_ + pos_);
    pos_ += sizeof(T);
    return value;
  }
  void get_bytes(void* out, size_t len) {
    std::memcpy(out, base_ + pos_, len);
    pos_ += len;
  }
  void skip(size_t len) { pos_ += len; }
  size_t position() const { return pos_; }

 private:
  const std::byte* base_;
  size_t pos_ = 0;
};

}  // namespace pcached::format
