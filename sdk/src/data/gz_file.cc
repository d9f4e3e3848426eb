// OpenForRead and ReadUpTo (see gz_file.h).

#include "data/gz_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shoal::data {
namespace {

// The Status for a failed gzread: IoError for an OS error, Corruption for a bad gzip stream.
Status GzReadError(gzFile f, const std::string& path) {
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum == Z_ERRNO) return Status::IoError(path + ": read failed: " + std::strerror(errno));
  return Status::Corruption(path + ": cannot decompress: " + (msg ? msg : "unknown zlib error"));
}

}  // namespace

StatusOr<GzHandle> OpenForRead(const std::string& path, const std::string& missing_hint) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound(path + ": no such file; " + missing_hint);
    return Status::IoError(path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  gzbuffer(f, 128 * 1024);
  return GzHandle(f);
}

StatusOr<size_t> ReadUpTo(gzFile f, const std::string& path, void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < n) {
    // gzread takes an unsigned length and returns an int: read in chunks well below both.
    const unsigned want = static_cast<unsigned>(std::min(n - done, size_t{1} << 30));
    const int got = gzread(f, p + done, want);
    if (got < 0) return GzReadError(f, path);
    if (got == 0) {
      // gzread returns 0 both at a clean end and when a gzip stream stops mid-way (gzerror then
      // reports Z_BUF_ERROR); only the first is an end of file.
      int errnum = 0;
      gzerror(f, &errnum);
      if (errnum != Z_OK) return GzReadError(f, path);
      break;
    }
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace shoal::data
