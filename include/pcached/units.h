// Sizes as operators read and write them: "4K", "16MiB", "1g" in, "16 MiB" out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pcached/status.h"

namespace pcached {

inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = 1024 * KiB;
inline constexpr uint64_t GiB = 1024 * MiB;

// Parses a byte count: digits with an optional binary suffix K, KiB, M, MiB, G, GiB, T, TiB
// (case-insensitive; "KB" is accepted as KiB). Rejects negatives, empty input, overflow.
Result<uint64_t> parse_size(std::string_view text);

// "512 B", "4 KiB", "1.5 GiB": exact for powers of two, one decimal otherwise.
std::string format_size(uint64_t bytes);

}  // namespace pcached
