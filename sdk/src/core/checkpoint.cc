// Checkpoint writing (buffered, CRC computed on the fly, atomic rename) and reading (whole file,
// CRC first, then a parser that bounds every length by the bytes that remain).

#include "core/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

namespace shoal {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'O', 'A', 'L', 'C', 'K', 'P'};
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4;  // magic + version
constexpr size_t kCrcBytes = 4;

std::string ErrnoText() { return std::strerror(errno); }

// write(2) until all of [p, p + n) is out, retrying on EINTR and short writes.
bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Encodes little-endian values into a file descriptor through a buffer and keeps the running
// crc32 of everything appended. The first error sticks; later calls do nothing.
class Encoder {
 public:
  Encoder(int fd, const std::string& path) : fd_(fd), path_(path) { buf_.reserve(kBufBytes); }

  void U32(uint32_t v) { LittleEndian(v, 4); }
  void U64(uint64_t v) { LittleEndian(v, 8); }
  void I64(int64_t v) { LittleEndian(static_cast<uint64_t>(v), 8); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));  // the caller checked the size fits
    Bytes(s.data(), s.size());
  }
  void Blob(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  void Floats(const float* f, size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      Bytes(reinterpret_cast<const char*>(f), n * sizeof(float));
    } else {
      for (size_t i = 0; i < n; ++i) U32(std::bit_cast<uint32_t>(f[i]));
    }
  }
  void Bytes(const char* p, size_t n) {
    if (!status_.ok() || n == 0) return;
    crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(p), n);
    if (buf_.size() + n <= kBufBytes) {
      buf_.append(p, n);
      return;
    }
    Flush();
    if (n >= kBufBytes) {
      if (status_.ok() && !WriteAll(fd_, p, n)) status_ = Status::IoError(path_ + ": write failed: " + ErrnoText());
    } else {
      buf_.append(p, n);
    }
  }

  // Appends the crc32 of everything so far (not itself covered) and writes out the buffer.
  Status Finish() {
    const uint32_t crc = static_cast<uint32_t>(crc_);
    U32(crc);
    Flush();
    return status_;
  }

 private:
  static constexpr size_t kBufBytes = size_t{1} << 20;

  void LittleEndian(uint64_t v, int bytes) {
    char b[8];
    for (int i = 0; i < bytes; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    Bytes(b, static_cast<size_t>(bytes));
  }
  void Flush() {
    if (status_.ok() && !buf_.empty() && !WriteAll(fd_, buf_.data(), buf_.size())) {
      status_ = Status::IoError(path_ + ": write failed: " + ErrnoText());
    }
    buf_.clear();
  }

  int fd_;
  const std::string& path_;
  std::string buf_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  Status status_;
};

// Reads little-endian values from an in-memory file. Every read is bounded by what remains;
// the first failure sticks and names what was being read and where.
class Decoder {
 public:
  Decoder(const std::string& path, const char* p, size_t n, size_t base) : path_(path), p_(p), n_(n), base_(base) {}

  size_t remaining() const { return n_ - pos_; }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  uint32_t U32(const char* what) { return static_cast<uint32_t>(LittleEndian(4, what)); }
  uint64_t U64(const char* what) { return LittleEndian(8, what); }
  int64_t I64(const char* what) { return static_cast<int64_t>(LittleEndian(8, what)); }
  // A u32 length and that many bytes.
  std::string Str(const char* what) {
    const uint32_t len = U32(what);
    return Take(len, what);
  }
  // A u64 length and that many bytes.
  std::string Blob(const char* what) {
    const uint64_t len = U64(what);
    return Take(len, what);
  }
  // n little-endian floats; the caller checked that n * 4 fits in what remains.
  void Floats(float* out, size_t n, const char* what) {
    if (!Need(n * sizeof(float), what)) return;
    if constexpr (std::endian::native == std::endian::little) {
      if (n != 0) std::memcpy(out, p_ + pos_, n * sizeof(float));
      pos_ += n * sizeof(float);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(U32(what));
    }
  }

  // Records a semantic error (a count that cannot fit, a negative dim) at the current offset.
  void Fail(const std::string& why) {
    if (status_.ok()) status_ = Status::Corruption(path_ + ": " + why + " at byte " + std::to_string(base_ + pos_));
  }

 private:
  bool Need(uint64_t bytes, const char* what) {
    if (!status_.ok()) return false;
    if (bytes > remaining()) {
      Fail(std::string("truncated ") + what + " (needs " + std::to_string(bytes) + " bytes, " +
           std::to_string(remaining()) + " left)");
      return false;
    }
    return true;
  }
  uint64_t LittleEndian(int bytes, const char* what) {
    if (!Need(static_cast<uint64_t>(bytes), what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p_[pos_ + i])} << (8 * i);
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::string Take(uint64_t len, const char* what) {
    if (!Need(len, what)) return {};
    std::string s(p_ + pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  const std::string& path_;
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
  size_t base_;  // file offset of p_[0], for messages
  Status status_;
};

uint32_t LoadLittleEndian32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// The fd is closed on every path; the temporary file is removed unless `keep_` is set.
class TempFile {
 public:
  TempFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!keep_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  // Closes the descriptor, reporting errors (on NFS, close is where a write can fail).
  bool Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  int fd_;
  bool keep_ = false;
};

// fsync on a directory, so a rename inside it survives a crash.
Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(dir + ": cannot open directory to sync it: " + ErrnoText());
  const bool ok = ::fsync(fd) == 0;
  const std::string err = ok ? "" : ErrnoText();
  ::close(fd);
  if (!ok) return Status::IoError(dir + ": fsync of directory failed: " + err);
  return Status::Ok();
}

}  // namespace

Status WriteCheckpoint(const std::string& path, const Checkpoint& ckpt) {
  if (path.empty()) return Status::InvalidArgument("checkpoint path is empty");

  // Everything the format stores with a u32 length or count must fit one.
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  auto too_long = [&](const std::string& what) {
    return Status::InvalidArgument(path + ": " + what + " does not fit the checkpoint format (4 GiB / 2^32 items)");
  };
  if (ckpt.model_spec.size() > kMax32) return too_long("model spec");
  if (ckpt.params.num_tensors() > kMax32) return too_long("tensor count");
  if (ckpt.sections.size() > kMax32) return too_long("section count");
  for (const auto& v : ckpt.params.views()) {
    if (v.spec.name.size() > kMax32 || v.spec.shape.size() > kMax32) return too_long("tensor '" + v.spec.name + "'");
  }
  for (const auto& [name, blob] : ckpt.sections) {
    if (name.size() > kMax32) return too_long("a section name");
  }

  const std::filesystem::path fspath(path);
  const std::filesystem::path parent = fspath.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::IoError(parent.string() + ": cannot create checkpoint directory: " + ec.message());
  }

  // 1. Write everything to path.tmp.
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(tmp + ": cannot create: " + ErrnoText());
  TempFile file(tmp, fd);

  Encoder enc(file.fd(), tmp);
  enc.Bytes(kMagic, sizeof(kMagic));
  enc.U32(kCheckpointVersion);
  enc.U64(ckpt.round);
  enc.Str(ckpt.model_spec);
  enc.U32(static_cast<uint32_t>(ckpt.params.num_tensors()));
  for (const auto& v : ckpt.params.views()) {
    enc.Str(v.spec.name);
    enc.U32(static_cast<uint32_t>(v.spec.shape.size()));
    for (int64_t d : v.spec.shape) enc.I64(d);
  }
  enc.U64(ckpt.params.size());
  enc.Floats(ckpt.params.data(), ckpt.params.size());
  enc.U32(static_cast<uint32_t>(ckpt.sections.size()));
  for (const auto& [name, blob] : ckpt.sections) {
    enc.Str(name);
    enc.Blob(blob);
  }
  SHOAL_RETURN_IF_ERROR(enc.Finish());

  // 2. Make the bytes durable before the rename makes them visible.
  if (::fsync(file.fd()) != 0) return Status::IoError(tmp + ": fsync failed: " + ErrnoText());
  if (!file.Close()) return Status::IoError(tmp + ": close failed: " + ErrnoText());

  // 3. Atomically replace the previous checkpoint.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IoError("cannot rename " + tmp + " to " + path + ": " + ErrnoText());
  }
  file.Keep();  // it is `path` now

  // 4. Make the rename itself durable.
  return SyncDirectory(parent.empty() ? std::string(".") : parent.string());
}

StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  // Read the whole file; its size bounds every allocation below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no checkpoint there");
    return Status::IoError(path + ": cannot open: " + ErrnoText());
  }
  std::string bytes;
  {
    struct stat st;
    Status st_status;
    if (::fstat(fd, &st) != 0) {
      st_status = Status::IoError(path + ": fstat failed: " + ErrnoText());
    } else if (!S_ISREG(st.st_mode)) {
      st_status = Status::IoError(path + ": not a regular file");
    } else {
      bytes.resize(static_cast<size_t>(st.st_size));
      size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t r = ::read(fd, bytes.data() + done, std::min(bytes.size() - done, size_t{1} << 30));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          st_status = Status::IoError(path + ": read failed: " + ErrnoText());
          break;
        }
        if (r == 0) {  // the file shrank while we read it
          bytes.resize(done);
          break;
        }
        done += static_cast<size_t>(r);
      }
    }
    ::close(fd);
    SHOAL_RETURN_IF_ERROR(st_status);
  }

  // Header, then the CRC over everything but itself, and only then the contents.
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption(path + ": not a Shoal checkpoint (bad magic)");
  }
  if (bytes.size() < kHeaderBytes + kCrcBytes) {
    return Status::Corruption(path + ": truncated checkpoint (" + std::to_string(bytes.size()) + " bytes)");
  }
  const uint32_t version = LoadLittleEndian32(bytes.data() + sizeof(kMagic));
  if (version != kCheckpointVersion) {
    return Status::Corruption(path + ": unsupported checkpoint format version " + std::to_string(version) +
                              " (this build reads version " + std::to_string(kCheckpointVersion) + ")");
  }
  const size_t body_end = bytes.size() - kCrcBytes;
  const uint32_t stored_crc = LoadLittleEndian32(bytes.data() + body_end);
  const auto crc = static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), body_end));
  if (crc != stored_crc) {
    return Status::Corruption(path + ": checksum mismatch (the file is truncated or corrupted)");
  }

  Decoder dec(path, bytes.data() + kHeaderBytes, body_end - kHeaderBytes, kHeaderBytes);
  Checkpoint ckpt;
  ckpt.round = dec.U64("round");
  ckpt.model_spec = dec.Str("model spec");

  // Layout. Each tensor takes at least 8 bytes (name length + ndims), each dim 8: bounding the
  // counts by what remains keeps a forged count from reserving absurd memory.
  const uint32_t num_tensors = dec.U32("tensor count");
  if (num_tensors > dec.remaining() / 8) dec.Fail("tensor count " + std::to_string(num_tensors) + " exceeds the file");
  std::vector<TensorSpec> layout;
  uint64_t total = 0;
  if (dec.ok()) layout.reserve(num_tensors);
  for (uint32_t t = 0; t < num_tensors && dec.ok(); ++t) {
    TensorSpec spec;
    spec.name = dec.Str("tensor name");
    const uint32_t ndims = dec.U32("tensor rank");
    if (ndims > dec.remaining() / 8) {
      dec.Fail("rank " + std::to_string(ndims) + " of tensor '" + spec.name + "' exceeds the file");
      break;
    }
    // Every partial product must fit int64_t, as TensorSpec::numel computes it that way.
    int64_t numel = 1;
    for (uint32_t i = 0; i < ndims && dec.ok(); ++i) {
      const int64_t d = dec.I64("tensor dim");
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) {
        dec.Fail("bad dim " + std::to_string(d) + " of tensor '" + spec.name + "'");
      }
      spec.shape.push_back(d);
    }
    if (dec.ok() && __builtin_add_overflow(total, static_cast<uint64_t>(numel), &total)) {
      dec.Fail("tensor sizes overflow");
    }
    layout.push_back(std::move(spec));
  }

  const uint64_t num_floats = dec.U64("float count");
  if (dec.ok() && num_floats != total) {
    dec.Fail("float count " + std::to_string(num_floats) + " does not match the layout's " + std::to_string(total));
  }
  if (dec.ok() && num_floats > dec.remaining() / sizeof(float)) {
    dec.Fail("float count " + std::to_string(num_floats) + " exceeds the file");
  }
  if (dec.ok()) {
    ckpt.params = ParameterArena(layout);
    dec.Floats(ckpt.params.data(), ckpt.params.size(), "parameters");
  }

  // Sections: each takes at least 12 bytes (name length + blob length).
  const uint32_t num_sections = dec.U32("section count");
  if (num_sections > dec.remaining() / 12) dec.Fail("section count " + std::to_string(num_sections) + " exceeds the file");
  for (uint32_t s = 0; s < num_sections && dec.ok(); ++s) {
    std::string name = dec.Str("section name");
    std::string blob = dec.Blob("section data");
    ckpt.sections.emplace_back(std::move(name), std::move(blob));
  }
  if (dec.ok() && dec.remaining() != 0) dec.Fail(std::to_string(dec.remaining()) + " unexpected trailing bytes");
  if (!dec.ok()) return dec.status();
  return ckpt;
}

}  // namespace shoal
