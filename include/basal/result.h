// Result<T>: the value-or-error type for basal's own operational errors (spawn failed, bad
// manifest, kernel lacks a feature). Outcomes a script caused are not errors of ours: see
// outcome.h. Programming errors are not Results either: they abort.
//
//   Result<Manifest> m = Manifest::Parse(text, registry);
//   if (!m) { std::cerr << m.error().message; return 1; }
//   Use(*m);
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace basal {

// A closed set of operational error codes.
enum class ErrorCode {
  kInvalidArgument,  // a caller passed something malformed (bad manifest, bad JSON input)
  kNotFound,         // a file, activation or flow that does not exist
  kIo,               // a read/write/open failed; message names the file and errno
  kSpawn,            // the worker could not be started
  kDatabase,         // SQLite refused an operation
  kUnsupported,      // the kernel or platform lacks a feature basal requires
  kInternal,         // an invariant of ours broke
  kUnavailable,      // the module is shutting down (or shut down): it takes no new work
  kRefused,          // the operator's approvals refuse it: not approved, revoked, ad hoc under require_approval
  kConflict,         // the state changed under the caller (a review gone stale), or it is already so
};

const char* ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

inline Error MakeError(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}    // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { Check(); return std::get<0>(v_); }
  const T& value() const& { Check(); return std::get<0>(v_); }
  T&& value() && { Check(); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    if (ok()) std::abort();
    return std::get<1>(v_);
  }

 private:
  void Check() const {
    if (!ok()) std::abort();
  }
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    if (ok_) std::abort();
    return error_;
  }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

inline Result<void> Ok() { return {}; }

}  // namespace basal
