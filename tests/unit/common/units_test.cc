#include <catch2/catch.hpp>

#include "pcached/units.h"

using namespace pcached;

TEST_CASE("parse_size accepts plain numbers and binary suffixes", "[units]") {
  CHECK(parse_size("0").value() == 0);
  CHECK(parse_size("4096").value() == 4096);
  CHECK(parse_size("4K").value() == 4096);
  CHECK(parse_size("4k").value() == 4096);
  CHECK(parse_size("4KiB").value() == 4096);
  CHECK(parse_size("16MiB").value() == 16 * MiB);
  CHECK(parse_size("1g").value() == GiB);
  CHECK(parse_size("2T").value() == 2048 * GiB);
}

TEST_CASE("parse_size rejects what is not a size, with the text in the message", "[units]") {
  for (const char* bad : {"", "-1", "K", "4X", "4 K", "1.5G", "99999999999999999999", "20000000T"}) {
    INFO(bad);
    Result<uint64_t> parsed = parse_size(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().message().find(std::string("'") + bad + "'") != std::string::npos);
  }
}

TEST_CASE("format_size prints exact binary units and one decimal otherwise", "[units]") {
  CHECK(format_size(0) == "0 B");
  CHECK(format_size(512) == "512 B");
  CHECK(format_size(4096) == "4 KiB");
  CHECK(format_size(16 * MiB) == "16 MiB");
  CHECK(format_size(GiB + GiB / 2) == "1.5 GiB");
  CHECK(format_size(1000) == "1000 B");
}
