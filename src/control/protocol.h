// The daemon's control protocol: one JSON request per connection on a unix socket, one JSON
// response back. Versioned: a request names the protocol version it speaks; the daemon refuses
// versions it does not know, with a message that says which it does.
//
//   {"version": 1, "command": "add", "args": {"cache": "/dev/dax0.0", "backing": "/dev/vdb"}}
//   {"version": 1, "ok": true, "result": {...}}
//   {"version": 1, "ok": false, "error": {"code": "EINVAL", "errno": 22, "message": "..."}}
//
// A long request (flush, remove) whose args ask for "progress": true gets progress lines before
// its response, one JSON object per line:
//   {"version": 1, "progress": {"dirty_bytes": ..., "written_back_bytes": ..., "elapsed_seconds": ...}}
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pcached/status.h"

namespace pcached::control {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxMessageBytes = 64 * 1024;
// Requests and responses nest a few levels. nlohmann parses iteratively but copies recursively,
// and 64 KiB of brackets nest deep enough to overflow a thread's stack in a debug or ASan build.
inline constexpr int kMaxNesting = 32;
inline constexpr const char* kDefaultSocket = "/run/pcached/pcached.sock";

struct Request {
  std::string command;
  nlohmann::json args = nlohmann::json::object();
};

// Parses and checks a request: JSON object, known version, a command name, args an object.
Result<Request> parse_request(std::string_view text);
std::string encode_request(const Request& request);

std::string encode_success(const nlohmann::json& result);
std::string encode_failure(const Status& status);
std::string encode_progress(const nlohmann::json& progress);

// A response as the client sees it: the daemon's result, or its error as a Status.
Result<nlohmann::json> parse_response(std::string_view text);

// Typed access to args, with messages that name the argument.
Result<std::string> string_arg(const nlohmann::json& args, const std::string& name, bool required,
                               const std::string& fallback = "");
Result<uint64_t> unsigned_arg(const nlohmann::json& args, const std::string& name, uint64_t fallback, uint64_t min,
                              uint64_t max);
Result<bool> bool_arg(const nlohmann::json& args, const std::string& name, bool fallback);

// Client side: sends one request to the daemon and returns its response; progress lines that come
// first go to on_progress.
using ProgressHandler = std::function<void(const nlohmann::json& progress)>;
Result<nlohmann::json> call(const std::string& socket_path, const Request& request,
                            const ProgressHandler& on_progress = {});

}  // namespace pcached::control
