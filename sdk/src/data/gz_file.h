// Reading a dataset file through zlib's gz* interface (internal to sdk/src/data), which reads
// gzip-compressed and plain files alike, so every format may be compressed. Shared by the
// CSV/IDX/digits loaders (loaders.cc) and the text loaders (text.cc).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <memory>
#include <string>

#include "shoal/status.h"

namespace shoal::data {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Opens `path` for reading. NotFound ("PATH: no such file; " + missing_hint) when it does not
// exist, InvalidArgument when it is not a regular file (a directory, a device: reading those
// would fail late or never end), IoError when the OS refuses.
StatusOr<GzHandle> OpenForRead(const std::string& path, const std::string& missing_hint);

// Reads up to `n` bytes into `out`; fewer only at the end of the (decompressed) stream.
// IoError for an OS error, Corruption for a bad or truncated gzip stream.
StatusOr<size_t> ReadUpTo(gzFile f, const std::string& path, void* out, size_t n);

}  // namespace shoal::data
