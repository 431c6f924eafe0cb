// Status and Result<T>: errors as values at module boundaries.
//
// A Status is either ok or carries an error code and a message meant for a user ("line 4:
// resources.cpus: expected a number"). Result<T> holds a T or a non-ok Status. Both are plain
// values: copyable, movable, and safe to pass between threads like any value type. Code that cannot
// continue on "cannot happen" aborts loudly instead of returning a Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace berth {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // bad input from a user: 400
  kNotFound,         // 404
  kConflict,         // state does not allow it: 409
  kInfeasible,       // can never be satisfied by this cluster: 422
  kUnauthorized,     // who you are is unknown: 401
  kForbidden,        // known, but without the right: 403
  kTooLarge,         // 413
  kNoSpace,          // out of disk where the request would be kept: 507
  kUnavailable,      // transient: network, peer down: 503
  kInternal,         // 500
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Invalid(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Conflict(std::string m) { return {Code::kConflict, std::move(m)}; }
  static Status Infeasible(std::string m) { return {Code::kInfeasible, std::move(m)}; }
  static Status Unauthorized(std::string m) { return {Code::kUnauthorized, std::move(m)}; }
  static Status Forbidden(std::string m) { return {Code::kForbidden, std::move(m)}; }
  static Status TooLarge(std::string m) { return {Code::kTooLarge, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Holds either a value or an error. Accessing value() of an error is a programming error.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace berth

#define BERTH_RETURN_IF_ERROR(expr) \
  do {                              \
    ::berth::Status _st = (expr);   \
    if (!_st.ok()) return _st;      \
  } while (0)
