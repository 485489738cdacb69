// The control-socket protocol over any bytes, as the daemon receives them: parse_request either
// gives a request (a command and an object of args) or refuses with EINVAL/EPROTO, never a crash
// or an exception. Then, on what it accepted: the typed argument accessors and the daemon's
// cache configuration (what "add" builds from args); a request re-encodes to one that parses the
// same; responses carry results and errors back; and the client's response parser takes the same
// bytes as if they were the daemon's answer.
//   input: the request text.
#include <cstdint>
#include <string>
#include <string_view>

#include "control/protocol.h"
#include "daemon/cache_config.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_walk.h"

using namespace pcached;

namespace {

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "protocol");
  seeds.write("add", R"({"version":1,"command":"add","args":{"cache":"/dev/dax0.0","backing":"/dev/vdb","queues":2,"depth":64,"name":"fast","format":true,"force":false,"copy_policy":"threshold:4K","segment_size":16777216,"gc_threshold":70,"read_miss_fill":true,"allow_volatile_region":false}})");
  seeds.write("remove", R"({"version":1,"command":"remove","args":{"name":"fast","no_flush":true}})");
  seeds.write("list", R"({"version":1,"command":"list"})");
  seeds.write("status", R"({"version":1,"command":"status","args":{"name":"/dev/ublkb0"}})");
  seeds.write("set", R"({"version":1,"command":"set","args":{"name":"fast","key":"gc_threshold","value":"50"}})");
  seeds.write("flush", "{\"version\": 1, \"command\": \"flush\", \"args\": {\"name\": \"c\\u00e9\"}}\n");
  seeds.write("newer-version", R"({"version":2,"command":"list"})");
  seeds.write("args-not-object", R"({"version":1,"command":"add","args":[1,2.5e3,null,"x"]})");
  seeds.write("no-command", R"({"version":1})");
  seeds.write("nul-in-string", R"({"version":1,"command":"add","args":{"cache":"/dev/a\u0000b","backing":"/b","queues":-1}})");
  seeds.write("big-number", R"({"version":1,"command":"add","args":{"cache":"/a","backing":"/b","depth":18446744073709551615,"queues":1e400}})");
  seeds.write("response-ok", R"({"version":1,"ok":true,"result":{"device":"/dev/ublkb0"}})");
  seeds.write("response-error", R"({"version":1,"ok":false,"error":{"code":"EBUSY","errno":16,"message":"busy"}})");
  seeds.write("not-json", "{\"version\":1,\"command\":\"li");
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // The client's side: any bytes as the daemon's answer.
  auto response = control::parse_response(text);
  FUZZ_CHECK(response.ok() || !response.status().message().empty());

  auto request = control::parse_request(text);
  if (!request.ok()) {
    FUZZ_CHECK(request.status().code() == EINVAL || request.status().code() == EPROTO);
    FUZZ_CHECK(!request.status().message().empty());
    // The daemon answers a refusal with its message, which may quote the input.
    FUZZ_CHECK(!control::parse_response(control::encode_failure(request.status())).ok());
    return 0;
  }
  FUZZ_CHECK(!request->command.empty());
  FUZZ_CHECK(request->args.is_object());
  const nlohmann::json& args = request->args;

  // What the daemon's commands read from args, and every name the input itself used.
  for (const char* name : {"cache", "backing", "name", "queues", "format", "force", "no_flush", "key", "value"}) {
    (void)control::string_arg(args, name, false);
    (void)control::unsigned_arg(args, name, 7, 1, 64);
    (void)control::bool_arg(args, name, false);
  }
  for (const auto& item : args.items()) {
    auto value = control::string_arg(args, item.key(), true);
    FUZZ_CHECK(value.ok() == (item.value().is_string() && item.value().get<std::string>().find('\0') == std::string::npos));
    auto number = control::unsigned_arg(args, item.key(), 0, 0, UINT64_MAX);
    FUZZ_CHECK(number.ok() == (item.value().is_null() || item.value().is_number_unsigned()));
  }
  if (auto config = daemon::config_from_json(args); config.ok()) {
    FUZZ_CHECK(daemon::check_cache_name(config->name).ok());
    FUZZ_CHECK(config->queues >= 1 && config->queues <= 64 && config->depth >= 1 && config->depth <= 4096);
  }

  // A request re-encodes to one that parses the same (unless it grew past the size limit, as
  // 1e5 does when written back as 100000.0, or holds a number JSON cannot write).
  const bool representable = !fuzz::has_non_finite_number(args);
  const std::string encoded = control::encode_request(request.value());
  if (representable && encoded.size() <= control::kMaxMessageBytes) {
    auto again = control::parse_request(encoded);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->command == request->command);
    FUZZ_CHECK(again->args == args);
  }

  // The daemon's answers reach the client intact.
  auto success = control::parse_response(control::encode_success(args));
  FUZZ_CHECK(success.ok());
  FUZZ_CHECK(!representable || success.value() == args);
  auto failure = control::parse_response(control::encode_failure(Status::error(EBUSY, request->command)));
  FUZZ_CHECK(!failure.ok() && failure.status().code() == EBUSY && failure.status().message() == request->command);
  return 0;
}
