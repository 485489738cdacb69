// The control socket: a unix stream socket, root-only (mode 0600), one request per connection,
// served one connection at a time. A handler may send progress lines before its response.
#pragma once

#include <atomic>
#include <functional>
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
  ~ControlServer();

 private:
  ControlServer(std::string path, Handler handler) : path_(std::move(path)), handler_(std::move(handler)) {}
  void serve();
  void serve_one(int client);

  std::string path_;
  Handler handler_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: tells the server thread to stop
  std::thread thread_;
};

}  // namespace pcached::daemon
