#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "control/protocol.h"

using namespace pcached;
using namespace pcached::control;

TEST_CASE("a well-formed request parses", "[control][protocol]") {
  auto request = parse_request(R"({"version":1,"command":"add","args":{"cache":"/dev/dax0.0","queues":2}})");
  REQUIRE(request.ok());
  CHECK(request->command == "add");
  CHECK(request->args["cache"] == "/dev/dax0.0");
  auto round_trip = parse_request(encode_request(request.value()));
  REQUIRE(round_trip.ok());
  CHECK(round_trip->args == request->args);
  CHECK(parse_request(R"({"version":1,"command":"list"})")->args.empty());
}

TEST_CASE("malformed requests are refused with the reason", "[control][protocol][bad-input]") {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"command":"list"})", "no protocol version"},
      {R"({"version":"1","command":"list"})", "no protocol version"},
      {R"({"version":1})", "no command"},
      {R"({"version":1,"command":""})", "no command"},
      {R"({"version":1,"command":7})", "no command"},
      {R"({"version":1,"command":"add","args":[1]})", "args must be an object"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto request = parse_request(c.text);
    REQUIRE_FALSE(request.ok());
    CHECK(request.status().message().find(c.reason) != std::string::npos);
  }
  auto newer = parse_request(R"({"version":2,"command":"list"})");
  CHECK(newer.status().code() == EPROTO);
  CHECK(newer.status().message().find("this daemon speaks version 1") != std::string::npos);
  const std::string huge = R"({"version":1,"command":"add","args":{"cache":")" + std::string(kMaxMessageBytes, 'x') + "\"}}";
  CHECK(parse_request(huge).status().message().find("larger than") != std::string::npos);
}

TEST_CASE("deeply nested requests are refused before they are copied", "[control][protocol][bad-input]") {
  // Found by the protocol fuzz target: 64 KiB of '[' overflowed the stack when the parsed args
  // were copied (ASan and -O0 builds; the daemon's control thread would die the same way).
  auto nested = [](int levels, const std::string& inner) {
    return R"({"version":1,"command":"add","args":{"a":)" + std::string(levels, '[') + inner + std::string(levels, ']') + "}}";
  };
  CHECK(parse_request(nested(kMaxNesting - 2, "")).ok());  // the request object and args are two levels
  auto deep = parse_request(nested(kMaxNesting - 1, ""));
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.status().message().find("nested deeper than 32 levels") != std::string::npos);
  CHECK_FALSE(parse_request(nested(30000, "")).ok());
  // Brackets inside strings are text, escaped quotes included.
  CHECK(parse_request(nested(1, R"("\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[")")).ok());
  CHECK(parse_response(std::string(30000, '[') + std::string(30000, ']')).status().code() == EPROTO);
}

TEST_CASE("typed arguments check type and range", "[control][protocol][bad-input]") {
  const nlohmann::json args = nlohmann::json::parse(
      R"({"name":"c","queues":2,"depth":-3,"big":99999999999,"flag":true,"word":"yes","nul":"a\u0000b"})");
  CHECK(string_arg(args, "name", true).value() == "c");
  CHECK(string_arg(args, "missing", false, "x").value() == "x");
  CHECK(string_arg(args, "missing", true).status().message().find("missing argument 'missing'") != std::string::npos);
  CHECK(string_arg(args, "queues", true).status().message().find("must be a string") != std::string::npos);
  CHECK(string_arg(args, "nul", true).status().message().find("NUL") != std::string::npos);
  CHECK(unsigned_arg(args, "queues", 1, 1, 64).value() == 2);
  CHECK(unsigned_arg(args, "depth", 1, 1, 4096).status().message().find("non-negative integer") != std::string::npos);
  CHECK(unsigned_arg(args, "big", 1, 1, 4096).status().message().find("between 1 and 4096") != std::string::npos);
  CHECK(unsigned_arg(args, "missing", 7, 1, 9).value() == 7);
  CHECK(bool_arg(args, "flag", false).value());
  CHECK(bool_arg(args, "word", false).status().message().find("true or false") != std::string::npos);
}

TEST_CASE("responses carry results and errors back", "[control][protocol]") {
  auto ok = parse_response(encode_success({{"device", "/dev/ublkb0"}}));
  REQUIRE(ok.ok());
  CHECK(ok.value()["device"] == "/dev/ublkb0");
  auto failed = parse_response(encode_failure(Status::error(EBUSY, "cache 'x' already uses /dev/vdb")));
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == EBUSY);
  CHECK(failed.status().message() == "cache 'x' already uses /dev/vdb");
  CHECK(parse_response("garbage").status().code() == EPROTO);
  // Invalid UTF-8 in a message (a path, say) still makes valid JSON.
  auto odd = parse_response(encode_failure(Status::error(EINVAL, std::string("bad \xff\xfe path"))));
  CHECK(odd.status().code() == EINVAL);
}

TEST_CASE("random bytes never crash the request parser", "[control][protocol][robustness]") {
  std::mt19937_64 rng(17);
  const std::string alphabet = "{}[]\":,0123456789abcdefghijklmnopqrstuvwxyz \\\n\t-+.eE";
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    if (i % 3 == 0) text = R"({"version":1,"command":)";
    const size_t len = rng() % 120;
    for (size_t j = 0; j < len; ++j) {
      text += i % 2 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    }
    auto request = parse_request(text);
    if (request.ok()) CHECK_FALSE(request->command.empty());
  }
}
