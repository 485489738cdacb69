#include "ublk/device_users.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/unique_fd.h"

namespace pcached::ublk {

namespace {

// Calls `visit` with each entry of `dir` until it returns true; an entry that vanishes under the
// walk (a process exiting) ends it quietly rather than throwing.
template <typename Visit>
bool any_entry(const std::filesystem::path& dir, Visit visit) {
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (visit(it->path())) return true;
  }
  return false;
}

// The devices stacked on it (device-mapper, md, ...), as /sys names them.
std::string holders_of(dev_t device) {
  std::string names;
  any_entry("/sys/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device)) + "/holders",
            [&](const std::filesystem::path& holder) {
              if (!names.empty()) names += ", ";
              names += holder.filename().string();
              return false;
            });
  return names;
}

std::string command_of(const std::string& pid) {
  std::ifstream comm("/proc/" + pid + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "?" : name;
}

// Whether the open file behind /proc/PID/fd/N is the device. Cached attributes only: the file
// may be on a network filesystem whose server does not answer.
bool is_device(const std::filesystem::path& fd, dev_t device) {
  struct statx st {};
  if (::statx(AT_FDCWD, fd.c_str(), AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT, STATX_TYPE, &st) != 0) return false;
  return S_ISBLK(st.stx_mode) && makedev(st.stx_rdev_major, st.stx_rdev_minor) == device;
}

// A process other than this one with the device open, if /proc shows one. (Without
// CAP_SYS_PTRACE, other users' descriptors are not readable; those go unseen.)
std::optional<std::string> process_with_open(dev_t device) {
  const std::string self = std::to_string(::getpid());
  std::optional<std::string> user;
  any_entry("/proc", [&](const std::filesystem::path& process) {
    const std::string pid = process.filename().string();
    unsigned long number = 0;
    if (std::from_chars(pid.data(), pid.data() + pid.size(), number).ptr != pid.data() + pid.size() || pid == self) {
      return false;
    }
    if (!any_entry(process / "fd", [&](const std::filesystem::path& fd) { return is_device(fd, device); })) return false;
    user = "process " + pid + " (" + command_of(pid) + ")";
    return true;
  });
  return user;
}

}  // namespace

Status ensure_unused(const std::string& block_device) {
  struct stat st {};
  if (::stat(block_device.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return Status();
  // A mount or a stacked device holds the disk exclusively; an exclusive open fails then. It is
  // closed at once: an open of ours would keep DEL_DEV waiting too.
  UniqueFd probe(::open(block_device.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC | O_NONBLOCK));
  if (!probe.valid() && errno == EBUSY) {
    const std::string holders = holders_of(st.st_rdev);
    return Status::error(EBUSY, block_device + " is in use: " +
                                    (holders.empty() ? "a filesystem is mounted on it, or a program claimed it"
                                                     : "held by " + holders) +
                                    "; unmount it (or remove what is stacked on it) first");
  }
  probe.reset();
  if (auto user = process_with_open(st.st_rdev)) {
    return Status::error(EBUSY, block_device + " is in use: " + *user + " has it open; close it first");
  }
  return Status();
}

}  // namespace pcached::ublk
