#include "daemon/control_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/thread_name.h"
#include "control/protocol.h"

namespace pcached::daemon {

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path, Handler handler) {
  auto server = std::unique_ptr<ControlServer>(new ControlServer(path, std::move(handler)));
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return Status::error(ENAMETOOLONG, "control socket path too long: " + path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  server->listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ::unlink(path.c_str());
  // Root only: the socket is created with no permissions for anyone else.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(server->listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::umask(old_mask);
  if (bound != 0 || ::listen(server->listener_.get(), 16) != 0) {
    return Status::error(errno, "cannot listen on " + path + ": " + std::strerror(errno));
  }
  server->wake_.reset(::eventfd(0, EFD_CLOEXEC));
  server->thread_ = std::thread([s = server.get()] {
    name_this_thread("pcached-ctl");
    s->serve();
  });
  spdlog::info("control socket {}", path);
  return server;
}

ControlServer::~ControlServer() {
  uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) spdlog::warn("control socket: cannot wake the server thread");
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void ControlServer::serve() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;  // the connections still get joined
    }
    if (fds[1].revents) break;
    UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    reap(false);
    if (!client.valid()) continue;
    if (connections_.size() >= kMaxConnections) {
      refuse(client.get(), Status::error(EBUSY, "the daemon is serving " + std::to_string(kMaxConnections) +
                                                    " control connections already; try again"));
      continue;
    }
    Connection& connection = connections_.emplace_back();
    connection.client = std::move(client);
    connection.thread = std::thread([this, &connection] {
      serve_one(connection.client.get());
      connection.client.reset();  // the client sees the end of the response now, not at the next reap
      connection.done.store(true, std::memory_order_release);
    });
  }
  reap(true);
}

void ControlServer::reap(bool all) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (all || it->done.load(std::memory_order_acquire)) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void ControlServer::refuse(int client, const Status& status) {
  // The request is read first (briefly: this holds up the accepting thread): closing a unix
  // socket with unread data resets the connection, and the client would see that, not the answer.
  timeval timeout{0, 200'000};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char buffer[4096];
  for (ssize_t n; (n = ::recv(client, buffer, sizeof buffer, 0)) > 0;) {
    if (std::memchr(buffer, '\n', static_cast<size_t>(n)) != nullptr) break;
  }
  const std::string response = control::encode_failure(status);
  if (::send(client, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    spdlog::debug("control socket: a refused client went away first");
  }
}

void ControlServer::serve_one(int client) {
  // A client gets 5 s to send its request; a silent or endless one is cut off.
  timeval timeout{5, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
    if (request.size() > control::kMaxMessageBytes || request.find('\n') != std::string::npos) break;
  }
  auto send_all = [client](const std::string& text) {
    size_t sent = 0;
    while (sent < text.size()) {
      const ssize_t n = ::send(client, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  };
  const std::string response = request.size() > control::kMaxMessageBytes
                                   ? control::encode_failure(Status::error(EINVAL, "bad request: larger than " +
                                                                                       std::to_string(control::kMaxMessageBytes) +
                                                                                       " bytes"))
                                   : handler_(request, send_all);
  send_all(response);
}

}  // namespace pcached::daemon
