// The control socket: a unix stream socket, root-only (mode 0600), one request per connection,
// each connection served on its own thread (a long flush does not hold up a status), at most
// kMaxConnections at once. A handler may send progress lines before its response.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "pcached/status.h"

namespace pcached::daemon {

class ControlServer {
 public:
  // Sends one line (a progress report) to the client at once; a client that went away is ignored.
  using Progress = std::function<void(const std::string& line)>;
  using Handler = std::function<std::string(const std::string& request, const Progress& progress)>;
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path, Handler handler);
  // Stops accepting, then waits for the connections being served (a flush finishes first).
  ~ControlServer();

  static constexpr size_t kMaxConnections = 16;

 private:
  struct Connection {
    UniqueFd client;
    std::atomic<bool> done{false};
    std::thread thread;
  };

  ControlServer(std::string path, Handler handler) : path_(std::move(path)), handler_(std::move(handler)) {}
  void serve();
  // Joins the connections whose thread has finished; with `all`, every one.
  void reap(bool all);
  void serve_one(int client);
  void refuse(int client, const Status& status);

  std::string path_;
  Handler handler_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: tells the server thread to stop
  std::thread thread_;
  std::list<Connection> connections_;  // the server thread's only
};

}  // namespace pcached::daemon
