// What the C ABI's files (capi/*.cc) share: turning Status into shoal_status and the thread's
// last error, the guard that keeps every C++ exception on this side, struct_size checks, the
// log routing, and the application's trainer and the built-in trainer's options as the C++
// API takes them. Internal to libshoal; no symbol here is exported (shoal.map).
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "shoal/shoal.h"
#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::capi {

// The message of the last failed call on this thread (shoal_last_error).
std::string& LastError();

shoal_status Fail(StatusCode code, std::string message);
inline shoal_status Fail(const Status& st) { return Fail(st.code(), st.message()); }
// A call's own result: OK, or a failure with its message.
inline shoal_status Result(const Status& st) { return st.ok() ? SHOAL_OK : Fail(st); }

inline std::string Str(const char* s, const char* fallback = "") { return s ? std::string(s) : std::string(fallback); }

// Inside a Guard body: returns a failed Status as a shoal_status (setting the last error).
#define SHOAL_RETURN_IF_ERROR_C(expr)   \
  do {                                  \
    const ::shoal::Status st_ = (expr); \
    if (!st_.ok()) return Fail(st_);    \
  } while (0)

// The size of a struct up to and including `field`: what a caller's struct_size must cover.
#define SHOAL_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

// Checks a struct_size field: the caller's struct must hold every field of the ABI that
// introduced the struct (`minimum`), and may not claim fields this library does not know (an
// application built against a newer header).
Status CheckSize(const char* what, size_t got, size_t minimum, size_t known);
template <typename T>
Status CheckSize(const char* what, size_t got, size_t minimum) {
  return CheckSize(what, got, minimum, sizeof(T));
}

// Runs `body`, turning any exception into Internal (nothing may unwind into C).
template <typename F>
shoal_status Guard(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(StatusCode::kInternal, "out of memory");
  } catch (const std::exception& e) {
    return Fail(StatusCode::kInternal, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return Fail(StatusCode::kInternal, "unexpected error");
  }
}

// Guard for a call on a handle (a shoal_client or shoal_peer: `last_error` member): NULL is
// an InvalidArgument naming `function`, and a failure's message also becomes the handle's
// last error.
template <typename Handle, typename F>
shoal_status HandleGuard(const char* function, const char* what, Handle* handle, F&& body) {
  if (!handle)
    return Guard([&] { return Fail(StatusCode::kInvalidArgument, std::string(function) + ": " + what + " is NULL"); });
  const shoal_status status = Guard(std::forward<F>(body));
  try {
    if (status == SHOAL_OK)
      handle->last_error.clear();
    else
      handle->last_error = LastError();
  } catch (...) {  // out of memory copying the message: the thread's last error still has it
  }
  return status;
}

// Installs the routing logger (stderr, or shoal_set_log_callback's target) at the first C-ABI
// call that can log, before any client or peer of this process exists.
void InitLogRouting();

// InvalidArgument for a shoal_trainer of an unknown version or without a required callback.
Status CheckCTrainer(const shoal_trainer& trainer);
// The application's callbacks (checked) as a shoal::Trainer; it calls their destroy when freed.
std::unique_ptr<Trainer> MakeCTrainer(const shoal_trainer& trainer);

// A callback's failure (nonzero rc, the reason it wrote into error) as a Status naming the
// callback: "the WHO's CALLBACK callback failed (rc): reason".
Status CallbackStatus(const char* who, const char* callback, int rc, const char* error);
// The size of the reason buffer handed to a callback.
constexpr size_t kErrorBytes = 1024;

// A task as the shoal_task a callback reads; everything it points at lives in `task` and in
// this object.
class CTask {
 public:
  explicit CTask(const TaskConfig& task);
  const shoal_task* get() const { return &ct_; }

 private:
  std::vector<shoal_tensor> tensors_;
  shoal_task ct_{};
};

// shoal_builtin_options as the C++ API takes them (struct_size and the partition checked).
StatusOr<BuiltinTrainerOptions> BuiltinOptions(const shoal_builtin_options* options);

}  // namespace shoal::capi
