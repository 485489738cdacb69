// The control socket end to end, without a kernel: the daemon's server with a scripted handler,
// and the CLI's client. Progress lines, hostile messages, concurrent and slow clients, the
// connection limit.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "cli/progress_bar.h"
#include "common/unique_fd.h"
#include "control/protocol.h"
#include "daemon/control_server.h"

using namespace pcached;
using nlohmann::json;

namespace {

std::string socket_path() {
  static int counter = 0;
  return "/tmp/pcached-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock";
}

// Answers like the daemon does: echo for "echo", three progress lines then a result for "drain",
// the parser's refusal for anything malformed.
std::string scripted(const std::string& text, const daemon::ControlServer::Progress& progress) {
  auto request = control::parse_request(text);
  if (!request.ok()) return control::encode_failure(request.status());
  if (request->command == "drain") {
    for (uint64_t left : {300u, 200u, 100u}) {
      progress(control::encode_progress({{"dirty_bytes", left}, {"written_back_bytes", 300 - left},
                                         {"elapsed_seconds", 1.0}}));
    }
    return control::encode_success({{"dirty_bytes", 0}});
  }
  return control::encode_success(request->args);
}

// Connects and returns the socket, without sending anything.
UniqueFd connect_to(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

// Sends raw bytes and returns the raw answer.
std::string raw_exchange(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may stop reading an oversized request
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd.get(), SHUT_WR);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<size_t>(n));
  return answer;
}

}  // namespace

TEST_CASE("requests and answers round-trip through the socket, progress first", "[control][server]") {
  const std::string path = socket_path();
  auto server = daemon::ControlServer::listen(path, scripted);
  REQUIRE(server.ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // root-only

  auto echoed = control::call(path, {"echo", {{"name", "web"}, {"depth", 64}}});
  REQUIRE(echoed.ok());
  CHECK(echoed.value() == json{{"name", "web"}, {"depth", 64}});

  std::vector<uint64_t> seen;
  auto drained = control::call(path, {"drain", json::object()},
                               [&](const json& report) { seen.push_back(report["dirty_bytes"].get<uint64_t>()); });
  REQUIRE(drained.ok());
  CHECK(drained.value()["dirty_bytes"] == 0);
  CHECK(seen == std::vector<uint64_t>{300, 200, 100});
  // A client that does not care about progress still gets the answer.
  CHECK(control::call(path, {"drain", json::object()}).ok());
}

TEST_CASE("hostile messages get an error answer and the server keeps serving", "[control][server][bad-input]") {
  const std::string path = socket_path();
  auto server = daemon::ControlServer::listen(path, scripted);
  REQUIRE(server.ok());
  struct Case {
    std::string bytes;
    const char* reason;
  };
  const Case cases[] = {
      {"{not json\n", "not valid JSON"},
      {"\n", "not valid JSON"},
      {std::string("\0\xff\xfe garbage\n", sizeof "\0\xff\xfe garbage\n" - 1), "not valid JSON"},
      {R"({"version":99,"command":"echo"})" "\n", "protocol version 99 is not supported"},
      {R"({"version":1,"command":"echo","args":[1]})" "\n", "args"},
      {std::string(control::kMaxMessageBytes + 10, 'x'), "larger than"},
  };
  for (const Case& c : cases) {
    INFO(c.reason);
    auto answer = control::parse_response(raw_exchange(path, c.bytes));
    REQUIRE_FALSE(answer.ok());
    CHECK(answer.status().message().find(c.reason) != std::string::npos);
  }
  CHECK(control::call(path, {"echo", {{"still", "alive"}}}).ok());
}

TEST_CASE("concurrent clients each get their own answer", "[control][server]") {
  const std::string path = socket_path();
  auto server = daemon::ControlServer::listen(path, scripted);
  REQUIRE(server.ok());
  std::vector<std::thread> clients;
  std::vector<int> wrong(8, 0);
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 25; ++i) {
        auto answer = control::call(path, {"echo", {{"client", c}, {"i", i}}});
        if (!answer.ok() || answer.value() != json{{"client", c}, {"i", i}}) ++wrong[static_cast<size_t>(c)];
      }
    });
  }
  for (auto& client : clients) client.join();
  CHECK(wrong == std::vector<int>(8, 0));
}

TEST_CASE("a request that takes long does not hold up the others", "[control][server]") {
  const std::string path = socket_path();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  auto server = daemon::ControlServer::listen(path, [&](const std::string& text, const daemon::ControlServer::Progress& progress) {
    auto request = control::parse_request(text);
    if (request.ok() && request->command == "slow") {
      started.set_value();
      released.wait();  // as a flush writing back for minutes
    }
    return scripted(text, progress);
  });
  REQUIRE(server.ok());
  auto slow = std::async(std::launch::async, [&] { return control::call(path, {"slow", {{"n", 1}}}); });
  started.get_future().wait();
  // Answered while the slow one still runs (the slow one cannot finish before it is released).
  auto echoed = control::call(path, {"echo", {{"meanwhile", true}}});
  REQUIRE(echoed.ok());
  CHECK(echoed.value() == json{{"meanwhile", true}});
  CHECK(slow.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  release.set_value();
  auto answer = slow.get();
  REQUIRE(answer.ok());
  CHECK(answer.value() == json{{"n", 1}});
}

TEST_CASE("connections beyond the limit are refused with the reason, and served again once others end",
          "[control][server][bad-input]") {
  const std::string path = socket_path();
  auto server = daemon::ControlServer::listen(path, scripted);
  REQUIRE(server.ok());
  // Clients that connect and say nothing: each holds a connection until it hangs up (or 5 s).
  std::vector<UniqueFd> silent;
  for (size_t i = 0; i < daemon::ControlServer::kMaxConnections; ++i) silent.push_back(connect_to(path));
  // Accepted one at a time: the last may still be on its way to its thread; ask until refused.
  Result<json> refused = json::object();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (refused.ok() && std::chrono::steady_clock::now() < deadline) refused = control::call(path, {"echo", {}});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == EBUSY);
  CHECK(refused.status().message().find("control connections already") != std::string::npos);
  silent.clear();  // they hang up; their threads answer the empty request and end
  Result<json> served = Status::error(EBUSY, "");
  while (!served.ok() && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(4)) {
    served = control::call(path, {"echo", {{"again", 1}}});
  }
  REQUIRE(served.ok());
  CHECK(served.value() == json{{"again", 1}});
}

TEST_CASE("a daemon that is not there is reported as unreachable", "[control][server]") {
  auto answer = control::call("/tmp/pcached-test-nobody-listens.sock", {"list", json::object()});
  REQUIRE_FALSE(answer.ok());
  CHECK(answer.status().code() == ECONNREFUSED);
  CHECK(answer.status().message().find("is the daemon running?") != std::string::npos);
}

TEST_CASE("the progress line shows what is left, the rate and the time to go", "[control][cli]") {
  const json report = {{"dirty_bytes", 64ull << 20}, {"written_back_bytes", 64ull << 20}, {"elapsed_seconds", 2.0}};
  const std::string line = cli::progress_line(report, 128ull << 20, 10);
  CHECK(line == "[#####.....] 64 MiB dirty left, 32 MiB/s, ETA 2s");
  CHECK(cli::progress_line(json{{"dirty_bytes", 0}}, 1, 4) == "[####] 0 B dirty left, 0 B/s, ETA -");
  // More dirty data than at the start (new writes): an empty bar, not a negative one.
  CHECK(cli::progress_line(json{{"dirty_bytes", 200}}, 100, 4).rfind("[....]", 0) == 0);
}
