// Error convention for all of pcached: functions that can fail return a Status (no value) or a
// Result<T> (a value or a Status). Exceptions are not thrown across subsystem APIs; the only
// exceptions caught are those of third-party libraries, at the call site, converted to Status.
//
// A Status carries an errno-style code (so the ublk frontend can hand it to the kernel as -code)
// and a message written for the operator: it names the object (device, path, offset) and the step
// that failed, e.g. "pmem region /dev/dax0.0: size 8 MiB is below the minimum of 16 MiB".
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace pcached {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success

  static Status error(int code, std::string message) { return Status(code, std::move(message)); }

  bool ok() const { return code_ == 0; }
  // errno value (EIO, EINVAL, ...); 0 on success.
  int code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with more context, keeping the code: "step: original message".
  Status with_context(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  Status(int code, std::string message) : code_(code == 0 ? EIO : code), message_(std::move(message)) {}

  int code_ = 0;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(state_); }
  // The failure; an ok Status when the result holds a value.
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }

  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace pcached
