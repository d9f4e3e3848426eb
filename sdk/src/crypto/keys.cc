#include "crypto/keys.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>

#include "crypto/crypto.h"

namespace shoal::crypto {

static_assert(kCurveKeyBytes == crypto_box_PUBLICKEYBYTES && kCurveKeyBytes == crypto_box_SECRETKEYBYTES);
static_assert(kCurveKeyBytes == crypto_scalarmult_BYTES && kCurveKeyBytes == crypto_scalarmult_SCALARBYTES);
static_assert(kSignPublicKeyBytes == crypto_sign_PUBLICKEYBYTES);
static_assert(kSignSecretKeyBytes == crypto_sign_SECRETKEYBYTES);

namespace {

// ZeroMQ RFC 32.
constexpr char kZ85Alphabet[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
static_assert(sizeof kZ85Alphabet == 86);

constexpr std::array<int8_t, 256> MakeZ85Decoder() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = -1;
  for (int i = 0; i < 85; ++i) table[static_cast<unsigned char>(kZ85Alphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kZ85Decoder = MakeZ85Decoder();

constexpr const char* kCurvePublic = "curve-public";
constexpr const char* kCurveSecret = "curve-secret";
constexpr const char* kSignPublic = "ed25519-public";
constexpr const char* kSignSecret = "ed25519-secret";
constexpr size_t kMaxKeyFileBytes = 64 * 1024;
constexpr size_t kMaxAllowListFileBytes = 16 << 20;  // ~400,000 keys

void Wipe(std::string& s) {
  if (!s.empty()) sodium_memzero(s.data(), s.size());
  s.clear();
}

std::string ErrnoText(int err) { return std::strerror(err); }

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string ModeText(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Reads a regular file of at most `max_bytes`. With `private_only`, refuses (before reading a
// byte) a file that group or others may read or write.
StatusOr<std::string> ReadSmallFile(const std::string& path, bool private_only, size_t max_bytes = kMaxKeyFileBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("cannot open " + path + ": " + ErrnoText(err));
    return Status::IoError("cannot open " + path + ": " + ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError("cannot stat " + path + ": " + ErrnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + " is not a regular file");
  }
  if (private_only && (st.st_mode & 077) != 0) {
    ::close(fd);
    const char* what = (st.st_mode & 044) != 0 ? "readable" : "writable";
    return Status::FailedPrecondition(path + " is " + what + " by others (mode " + ModeText(st.st_mode) +
                                      "); chmod 600 " + path);
  }
  if (st.st_size > static_cast<off_t>(max_bytes)) {
    ::close(fd);
    return Status::InvalidArgument(path + " is too large for a key file (" + std::to_string(st.st_size) + " bytes)");
  }
  std::string content;
  // Secret files: no reallocation, so no stray copies of secret bytes are left in freed memory.
  content.reserve(private_only ? max_bytes + 1 : static_cast<size_t>(st.st_size) + 1);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      sodium_memzero(buf, sizeof buf);
      Wipe(content);
      return Status::IoError("cannot read " + path + ": " + ErrnoText(err));
    }
    if (n == 0) break;
    if (content.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      sodium_memzero(buf, sizeof buf);
      Wipe(content);
      return Status::InvalidArgument(path + " is too large for a key file");
    }
    content.append(buf, static_cast<size_t>(n));
  }
  sodium_memzero(buf, sizeof buf);
  ::close(fd);
  return content;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes `content` to a fresh temporary file (O_EXCL, created 0600, then fchmod to `mode`) next
// to `path`, fsyncs it, and moves it into place: link() without `force` (fails atomically if
// `path` exists), rename() with it. Then fsyncs the directory.
Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode, bool force) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);  // mode 0600, O_CREAT|O_EXCL
  if (fd < 0) {
    const int err = errno;
    return Status::IoError("cannot create a file next to " + path + ": " + ErrnoText(err));
  }
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::IoError(what + " " + path + ": " + ErrnoText(err));
  };
  if (::fchmod(fd, mode) != 0) return fail("cannot set the mode of", errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write", errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IoError("cannot write " + path + ": " + ErrnoText(err));
  }
  if (force) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return Status::IoError("cannot write " + path + ": " + ErrnoText(err));
    }
  } else {
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      if (err == EEXIST) return Status::FailedPrecondition("refusing to overwrite " + path + " (use --force)");
      return Status::IoError("cannot write " + path + ": " + ErrnoText(err));
    }
    ::unlink(tmp.c_str());
  }
  const int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: the file itself is complete either way
    ::close(dfd);
  }
  return Status::Ok();
}

// Checks a Z85 key field and decodes it into `out`.
Status DecodeField(const std::string& path, const char* label, std::string_view value, std::span<uint8_t> out) {
  Status st = Z85DecodeTo(value, out);
  if (!st.ok()) return Status::Corruption(path + ": " + label + ": " + st.message());
  return Status::Ok();
}

}  // namespace

KeyPair::~KeyPair() {
  sodium_memzero(curve_secret.data(), curve_secret.size());
  sodium_memzero(sign_secret.data(), sign_secret.size());
}

bool KeyPair::operator==(const KeyPair& o) const {
  return sodium_memcmp(curve_public.data(), o.curve_public.data(), curve_public.size()) == 0 &&
         sodium_memcmp(curve_secret.data(), o.curve_secret.data(), curve_secret.size()) == 0 &&
         sodium_memcmp(sign_public.data(), o.sign_public.data(), sign_public.size()) == 0 &&
         sodium_memcmp(sign_secret.data(), o.sign_secret.data(), sign_secret.size()) == 0;
}

StatusOr<std::string> Z85Encode(std::span<const uint8_t> bytes) {
  if (bytes.size() % 4 != 0)
    return Status::InvalidArgument("Z85 encodes a multiple of 4 bytes, got " + std::to_string(bytes.size()));
  std::string out;
  out.reserve(bytes.size() / 4 * 5);
  for (size_t i = 0; i < bytes.size(); i += 4) {
    uint32_t v = (uint32_t{bytes[i]} << 24) | (uint32_t{bytes[i + 1]} << 16) | (uint32_t{bytes[i + 2]} << 8) |
                 uint32_t{bytes[i + 3]};
    char chunk[5];
    for (int j = 4; j >= 0; --j) {
      chunk[j] = kZ85Alphabet[v % 85];
      v /= 85;
    }
    out.append(chunk, 5);
    sodium_memzero(chunk, sizeof chunk);
  }
  return out;
}

Status Z85DecodeTo(std::string_view text, std::span<uint8_t> out) {
  auto fail = [&](std::string message) {
    if (!out.empty()) sodium_memzero(out.data(), out.size());
    return Status::InvalidArgument(std::move(message));
  };
  if (out.size() % 4 != 0 || text.size() != out.size() / 4 * 5)
    return fail("expected " + std::to_string(out.size() / 4 * 5) + " Z85 characters, got " +
                std::to_string(text.size()));
  for (size_t i = 0, o = 0; i < text.size(); i += 5, o += 4) {
    uint64_t v = 0;
    for (size_t j = 0; j < 5; ++j) {
      const int8_t d = kZ85Decoder[static_cast<unsigned char>(text[i + j])];
      if (d < 0) return fail("invalid Z85 character at position " + std::to_string(i + j + 1));
      v = v * 85 + static_cast<uint64_t>(d);
    }
    if (v > 0xFFFFFFFFull) return fail("invalid Z85 group at position " + std::to_string(i + 1) + " (overflows 32 bits)");
    out[o] = static_cast<uint8_t>(v >> 24);
    out[o + 1] = static_cast<uint8_t>(v >> 16);
    out[o + 2] = static_cast<uint8_t>(v >> 8);
    out[o + 3] = static_cast<uint8_t>(v);
  }
  return Status::Ok();
}

StatusOr<std::vector<uint8_t>> Z85Decode(std::string_view text) {
  if (text.size() % 5 != 0)
    return Status::InvalidArgument("Z85 text length must be a multiple of 5, got " + std::to_string(text.size()));
  std::vector<uint8_t> out(text.size() / 5 * 4);
  SHOAL_RETURN_IF_ERROR(Z85DecodeTo(text, out));
  return out;
}

std::string Z85Key(const std::array<uint8_t, kCurveKeyBytes>& key) { return std::move(Z85Encode(key)).value(); }

StatusOr<KeyPair> GenerateKeyPair() {
  EnsureInit();
  KeyPair kp;
  // One secret, two forms: the CURVE pair is the X25519 form of the Ed25519 pair, so a peer that
  // holds the .pub (CURVE) key can check an Ed25519 identity against it (SignToCurvePublic):
  // secure aggregation's trusted rosters are the same .pub files as the allow-lists. Using one
  // key for X25519 and Ed25519 is the XEdDSA arrangement (Signal); the two uses never sign or
  // agree on the same bytes.
  if (crypto_sign_keypair(kp.sign_public.data(), kp.sign_secret.data()) != 0)
    return Status::Internal("crypto_sign_keypair failed");
  if (crypto_sign_ed25519_sk_to_curve25519(kp.curve_secret.data(), kp.sign_secret.data()) != 0 ||
      crypto_scalarmult_base(kp.curve_public.data(), kp.curve_secret.data()) != 0)
    return Status::Internal("deriving the CURVE key from the Ed25519 key failed");
  return kp;
}

Status WriteKeyFiles(const std::string& prefix, const KeyPair& keys, bool force) {
  if (prefix.empty()) return Status::InvalidArgument("empty key file prefix");
  const std::string key_path = prefix + ".key", pub_path = prefix + ".pub";
  if (!force) {
    for (const std::string& p : {key_path, pub_path}) {
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0) return Status::FailedPrecondition("refusing to overwrite " + p + " (use --force)");
    }
  }
  std::string curve_secret = Z85Encode(keys.curve_secret).value();
  std::string sign_secret = Z85Encode(keys.sign_secret).value();
  std::string secret;
  secret.reserve(512);  // large enough: no reallocation leaves copies of the secret behind
  secret += "# shoal secret key file: keep private (mode 0600)\n";
  secret += std::string(kCurvePublic) + " = " + Z85Key(keys.curve_public) + "\n";
  secret += kCurveSecret;
  secret += " = ";
  secret += curve_secret;
  secret += "\n";
  secret += std::string(kSignPublic) + " = " + Z85Key(keys.sign_public) + "\n";
  secret += kSignSecret;
  secret += " = ";
  secret += sign_secret;
  secret += "\n";
  Wipe(curve_secret);
  Wipe(sign_secret);
  Status st = WriteFileAtomic(key_path, secret, 0600, force);
  Wipe(secret);
  SHOAL_RETURN_IF_ERROR(st);
  st = WriteFileAtomic(pub_path, Z85Key(keys.curve_public) + "\n", 0644, force);
  if (!st.ok() && !force) ::unlink(key_path.c_str());  // we created it just now: leave no half pair
  return st;
}

StatusOr<KeyPair> ReadSecretKeyFile(const std::string& path) {
  EnsureInit();
  SHOAL_ASSIGN_OR_RETURN(std::string content, ReadSmallFile(path, /*private_only=*/true));
  std::map<std::string, std::string_view> fields;
  Status error;
  size_t line_no = 0;
  for (size_t pos = 0; pos <= content.size() && error.ok();) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    const std::string_view line = Trim(std::string_view(content).substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    // '=' is also a Z85 character: the label is what precedes the first '=' and must look
    // like one ([a-z0-9-]+), and a line that is a whole key (40 or 80 Z85 characters, which
    // may start with something label-like, "v=...") is a bare key line: reported as such,
    // and never echoed.
    const size_t eq = line.find('=');
    const std::string where = path + " line " + std::to_string(line_no);
    const std::string label(eq == std::string_view::npos ? std::string_view() : Trim(line.substr(0, eq)));
    const bool bare_key = (line.size() == 40 || line.size() == 80) &&
                          std::all_of(line.begin(), line.end(), [](char c) { return kZ85Decoder[static_cast<unsigned char>(c)] >= 0; });
    if (bare_key || label.empty() || label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
      error = Status::Corruption(where + ": expected 'label = value'");
      break;
    }
    if (label != kCurvePublic && label != kCurveSecret && label != kSignPublic && label != kSignSecret) {
      error = Status::Corruption(where + ": unknown label '" + label + "'");
    } else if (fields.count(label)) {
      error = Status::Corruption(where + ": '" + label + "' appears twice");
    } else {
      fields[label] = Trim(line.substr(eq + 1));
    }
  }
  for (const char* label : {kCurvePublic, kCurveSecret, kSignPublic, kSignSecret}) {
    if (error.ok() && !fields.count(label))
      error = Status::Corruption(path + ": missing '" + label + "' line (not a shoal-keygen secret key file?)");
  }
  KeyPair kp;
  if (error.ok()) error = DecodeField(path, kCurvePublic, fields[kCurvePublic], kp.curve_public);
  if (error.ok()) error = DecodeField(path, kCurveSecret, fields[kCurveSecret], kp.curve_secret);
  if (error.ok()) error = DecodeField(path, kSignPublic, fields[kSignPublic], kp.sign_public);
  if (error.ok()) error = DecodeField(path, kSignSecret, fields[kSignSecret], kp.sign_secret);
  fields.clear();
  Wipe(content);
  SHOAL_RETURN_IF_ERROR(error);

  std::array<uint8_t, kCurveKeyBytes> derived{};
  if (crypto_scalarmult_base(derived.data(), kp.curve_secret.data()) != 0 ||
      sodium_memcmp(derived.data(), kp.curve_public.data(), derived.size()) != 0)
    return Status::Corruption(path + ": curve-public does not match curve-secret");
  std::array<uint8_t, kSignPublicKeyBytes> sign_pk{};
  crypto_sign_ed25519_sk_to_pk(sign_pk.data(), kp.sign_secret.data());
  if (sodium_memcmp(sign_pk.data(), kp.sign_public.data(), sign_pk.size()) != 0)
    return Status::Corruption(path + ": ed25519-public does not match ed25519-secret");
  // The secret key is seed || public key: check that the seed really derives that public key.
  std::array<uint8_t, crypto_sign_SEEDBYTES> seed{};
  std::array<uint8_t, kSignSecretKeyBytes> resk{};
  crypto_sign_ed25519_sk_to_seed(seed.data(), kp.sign_secret.data());
  const int rc = crypto_sign_seed_keypair(sign_pk.data(), resk.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  const bool same = rc == 0 && sodium_memcmp(resk.data(), kp.sign_secret.data(), resk.size()) == 0;
  sodium_memzero(resk.data(), resk.size());
  if (!same) return Status::Corruption(path + ": ed25519-secret is inconsistent (its seed does not derive its public key)");
  return kp;
}

namespace {

struct PublicKeyLine {
  std::string key;  // Z85
  size_t line = 0;
};

// The Z85 public keys in a .pub or allow-list file, in order (see keys.h). `where` names the
// file in messages. A secret key file is refused, and its lines are never parsed or echoed.
StatusOr<std::vector<PublicKeyLine>> ParsePublicKeys(const std::string& where, std::string& content) {
  // '#' starts a comment: no valid Z85 group starts with '#' (the largest is "%nSc0").
  for (size_t pos = 0; pos <= content.size();) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    const std::string_view line = Trim(std::string_view(content).substr(pos, end - pos));
    pos = end + 1;
    if (line.starts_with(kCurveSecret) || line.starts_with(kSignSecret)) {
      Wipe(content);
      return Status::InvalidArgument(where + " is a secret key file; give the .pub file instead");
    }
  }
  std::vector<PublicKeyLine> keys;
  std::array<uint8_t, kCurveKeyBytes> key{};
  size_t line_no = 0;
  for (size_t pos = 0; pos <= content.size();) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string_view line = Trim(std::string_view(content).substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const std::string at = where + " line " + std::to_string(line_no);
    const size_t ws = line.find_first_of(" \t");
    if (ws != std::string_view::npos) {
      if (Trim(line.substr(ws))[0] != '#') return Status::InvalidArgument(at + ": expected one key per line");
      line = line.substr(0, ws);
    }
    if (Status st = Z85DecodeTo(line, key); !st.ok()) return Status::InvalidArgument(at + ": " + st.message());
    keys.push_back({std::string(line), line_no});
  }
  return keys;
}

}  // namespace

StatusOr<std::string> ReadPublicKey(const std::string& key_or_file) {
  std::array<uint8_t, kCurveKeyBytes> key{};
  struct stat st {};
  const bool exists = ::stat(key_or_file.c_str(), &st) == 0;
  if (!exists && key_or_file.size() == kZ85KeyChars && Z85DecodeTo(key_or_file, key).ok()) return key_or_file;
  auto content = ReadSmallFile(key_or_file, /*private_only=*/false);
  if (!content.ok()) {
    if (content.status().code() == StatusCode::kNotFound)
      return Status::NotFound("'" + key_or_file + "' is neither a 40-character Z85 public key nor a readable file");
    return content.status();
  }
  SHOAL_ASSIGN_OR_RETURN(auto keys, ParsePublicKeys(key_or_file, *content));
  if (keys.empty()) return Status::InvalidArgument(key_or_file + ": no public key in the file");
  if (keys.size() > 1)
    return Status::InvalidArgument(key_or_file + " line " + std::to_string(keys[1].line) +
                                   ": expected one public key, found another line");
  return keys[0].key;
}

StatusOr<AllowList> AllowList::Load(const std::string& file_or_dir) {
  AllowList list;
  list.source_ = file_or_dir;
  struct stat st {};
  if (::stat(file_or_dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("allow-list " + file_or_dir + " does not exist");
    return Status::IoError("cannot read allow-list " + file_or_dir + ": " + ErrnoText(err));
  }
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(file_or_dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.' || !entry.is_regular_file(ec)) continue;
      files.push_back(entry.path().string());
    }
    if (ec) return Status::IoError("cannot list allow-list directory " + file_or_dir + ": " + ec.message());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(file_or_dir);
  }
  for (const std::string& f : files) {
    SHOAL_ASSIGN_OR_RETURN(std::string content, ReadSmallFile(f, /*private_only=*/false, kMaxAllowListFileBytes));
    SHOAL_ASSIGN_OR_RETURN(auto keys, ParsePublicKeys(f, content));
    for (auto& k : keys) list.keys_.insert(std::move(k.key));
  }
  return list;
}

bool AllowList::Contains(std::string_view key) const {
  if (key.size() == kCurveKeyBytes) {
    auto z85 = Z85Encode({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
    return z85.ok() && keys_.count(*z85) > 0;
  }
  return keys_.find(key) != keys_.end();
}

}  // namespace shoal::crypto
