// The C ABI's status, version and error entry points, and the helpers of capi.h that turn a
// Status into a shoal_status.
#include <string>

#include "capi/capi.h"
#include "shoal/client.h"
#include "shoal/config.h"

static_assert(SHOAL_OK == static_cast<int>(shoal::StatusCode::kOk));
static_assert(SHOAL_INVALID_ARGUMENT == static_cast<int>(shoal::StatusCode::kInvalidArgument));
static_assert(SHOAL_NOT_FOUND == static_cast<int>(shoal::StatusCode::kNotFound));
static_assert(SHOAL_IO_ERROR == static_cast<int>(shoal::StatusCode::kIoError));
static_assert(SHOAL_CORRUPTION == static_cast<int>(shoal::StatusCode::kCorruption));
static_assert(SHOAL_PROTOCOL == static_cast<int>(shoal::StatusCode::kProtocol));
static_assert(SHOAL_UNAVAILABLE == static_cast<int>(shoal::StatusCode::kUnavailable));
static_assert(SHOAL_CANCELLED == static_cast<int>(shoal::StatusCode::kCancelled));
static_assert(SHOAL_FAILED_PRECONDITION == static_cast<int>(shoal::StatusCode::kFailedPrecondition));
static_assert(SHOAL_INTERNAL == static_cast<int>(shoal::StatusCode::kInternal));
static_assert(SHOAL_PERMISSION_DENIED == static_cast<int>(shoal::StatusCode::kPermissionDenied));

namespace shoal::capi {

std::string& LastError() {
  thread_local std::string last_error;
  return last_error;
}

shoal_status Fail(StatusCode code, std::string message) {
  LastError() = std::move(message);
  return static_cast<shoal_status>(code);
}

Status CheckSize(const char* what, size_t got, size_t minimum, size_t known) {
  if (got < minimum || got > known)
    return Status::InvalidArgument(std::string(what) + ".struct_size is " + std::to_string(got) + "; this library (ABI " +
                                   std::to_string(SHOAL_ABI_VERSION) + ") expects " +
                                   (minimum == known ? std::to_string(known)
                                                     : std::to_string(minimum) + ".." + std::to_string(known)) +
                                   " (use the matching _init function, or sizeof)");
  return Status::Ok();
}

}  // namespace shoal::capi

extern "C" {

const char* shoal_version(void) { return SHOAL_VERSION_STRING; }
int shoal_abi_version(void) { return SHOAL_ABI_VERSION; }

const char* shoal_status_name(int status) {
  static const char* const kNames[] = {"OK",          "InvalidArgument", "NotFound",           "IoError",
                                       "Corruption",  "Protocol",        "Unavailable",        "Cancelled",
                                       "FailedPrecondition", "Internal", "PermissionDenied"};
  return status >= 0 && status <= SHOAL_PERMISSION_DENIED ? kNames[status] : "Unknown";
}

const char* shoal_last_error(void) { return shoal::capi::LastError().c_str(); }

}  // extern "C"
