#include "control/protocol.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "common/unique_fd.h"

namespace pcached::control {

namespace {

Status bad_request(const std::string& why) { return Status::error(EINVAL, "bad request: " + why); }

const char* errno_name(int code) {
  switch (code) {
    case EINVAL: return "EINVAL";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EBUSY: return "EBUSY";
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case EPROTO: return "EPROTO";
    case ENOTSUP: return "ENOTSUP";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    default: return "ERROR";
  }
}

// Whether arrays and objects in the JSON text nest deeper than kMaxNesting (brackets inside
// strings do not count; malformed text is left to the parser).
bool nested_too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

Result<Request> parse_request(std::string_view text) {
  if (text.size() > kMaxMessageBytes) return bad_request("larger than " + std::to_string(kMaxMessageBytes) + " bytes");
  if (nested_too_deep(text)) return bad_request("nested deeper than " + std::to_string(kMaxNesting) + " levels");
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad_request("not valid JSON");
  if (!doc.is_object()) return bad_request("not a JSON object");
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer()) return bad_request("no protocol version");
  if (*version != kProtocolVersion) {
    return Status::error(EPROTO, "protocol version " + version->dump() + " is not supported; this daemon speaks version " +
                                     std::to_string(kProtocolVersion));
  }
  const auto command = doc.find("command");
  if (command == doc.end() || !command->is_string() || command->get<std::string>().empty()) {
    return bad_request("no command");
  }
  Request request;
  request.command = command->get<std::string>();
  if (const auto args = doc.find("args"); args != doc.end()) {
    if (!args->is_object()) return bad_request("args must be an object");
    request.args = *args;
  }
  return request;
}

std::string encode_request(const Request& request) {
  return nlohmann::json{{"version", kProtocolVersion}, {"command", request.command}, {"args", request.args}}.dump() + "\n";
}

std::string encode_success(const nlohmann::json& result) {
  return nlohmann::json{{"version", kProtocolVersion}, {"ok", true}, {"result", result}}.dump() + "\n";
}

std::string encode_failure(const Status& status) {
  return nlohmann::json{{"version", kProtocolVersion},
                        {"ok", false},
                        {"error", {{"code", errno_name(status.code())}, {"errno", status.code()}, {"message", status.message()}}}}
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::string encode_progress(const nlohmann::json& progress) {
  return nlohmann::json{{"version", kProtocolVersion}, {"progress", progress}}.dump() + "\n";
}

Result<nlohmann::json> parse_response(std::string_view text) {
  const nlohmann::json doc =
      nested_too_deep(text) ? nlohmann::json(nlohmann::json::value_t::discarded) : nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("ok") || !doc["ok"].is_boolean()) {
    return Status::error(EPROTO, "the daemon's answer is not a pcached response");
  }
  if (doc["ok"]) return doc.contains("result") ? doc["result"] : nlohmann::json::object();
  const nlohmann::json& error = doc.contains("error") ? doc["error"] : nlohmann::json::object();
  const int code = error.contains("errno") && error["errno"].is_number_integer() ? error["errno"].get<int>() : EIO;
  const std::string message =
      error.contains("message") && error["message"].is_string() ? error["message"].get<std::string>() : "unknown error";
  return Status::error(code, message);
}

Result<std::string> string_arg(const nlohmann::json& args, const std::string& name, bool required,
                               const std::string& fallback) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) {
    if (required) return bad_request("missing argument '" + name + "'");
    return fallback;
  }
  if (!it->is_string()) return bad_request("argument '" + name + "' must be a string");
  const std::string value = it->get<std::string>();
  if (value.find('\0') != std::string::npos) return bad_request("argument '" + name + "' contains a NUL byte");
  return value;
}

Result<uint64_t> unsigned_arg(const nlohmann::json& args, const std::string& name, uint64_t fallback, uint64_t min,
                              uint64_t max) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) return fallback;
  if (!it->is_number_unsigned()) return bad_request("argument '" + name + "' must be a non-negative integer");
  const uint64_t value = it->get<uint64_t>();
  if (value < min || value > max) {
    return bad_request("argument '" + name + "' is " + std::to_string(value) + "; it must be between " +
                       std::to_string(min) + " and " + std::to_string(max));
  }
  return value;
}

Result<bool> bool_arg(const nlohmann::json& args, const std::string& name, bool fallback) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return bad_request("argument '" + name + "' must be true or false");
  return it->get<bool>();
}

Result<nlohmann::json> call(const std::string& socket_path, const Request& request, const ProgressHandler& on_progress) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof address.sun_path) return Status::error(ENAMETOOLONG, "socket path too long");
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int err = errno;
    return Status::error(err == ENOENT || err == ECONNREFUSED ? ECONNREFUSED : err,
                         "cannot reach pcachedd at " + socket_path + ": " + std::strerror(err) +
                             " (is the daemon running? systemctl start pcached)");
  }
  const std::string message = encode_request(request);
  if (::send(fd.get(), message.data(), message.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(message.size())) {
    return Status::error(errno, "cannot send to pcachedd: " + std::string(std::strerror(errno)));
  }
  ::shutdown(fd.get(), SHUT_WR);
  std::string answer;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::error(errno, "cannot read pcachedd's answer: " + std::string(std::strerror(errno)));
    if (n == 0) break;
    answer.append(buffer, static_cast<size_t>(n));
    // Every complete line with more after it is a progress report; the last line is the answer.
    for (size_t end = answer.find('\n'); end != std::string::npos && end + 1 < answer.size(); end = answer.find('\n')) {
      const nlohmann::json line = nlohmann::json::parse(std::string_view(answer).substr(0, end), nullptr, false);
      if (!line.is_object() || !line.contains("progress")) break;
      if (on_progress) on_progress(line["progress"]);
      answer.erase(0, end + 1);
    }
    if (answer.size() > 16 * kMaxMessageBytes) return Status::error(EPROTO, "pcachedd's answer is too large");
  }
  return parse_response(answer);
}

}  // namespace pcached::control
