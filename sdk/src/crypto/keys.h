// Key pairs, Z85 text encoding and the key files written by shoal-keygen (DESIGN.md §5, §6).
//
// Files (PREFIX given to shoal-keygen):
//
//   PREFIX.key  the secret file, mode 0600, never readable by group/others. Text lines:
//                 # shoal secret key file: keep private (mode 0600)
//                 curve-public = <40 Z85 chars>      X25519 public key (the CurveZMQ identity)
//                 curve-secret = <40 Z85 chars>      X25519 secret key
//                 ed25519-public = <40 Z85 chars>    Ed25519 public key
//                 ed25519-secret = <80 Z85 chars>    Ed25519 secret key, libsodium layout
//                                                    (32-byte seed followed by the public key)
//               Blank lines and lines starting with '#' are ignored; each labelled line must
//               appear exactly once; spaces around '=' are optional.
//   PREFIX.pub  one line: the Z85 CURVE (X25519) public key, 40 characters. This is what goes
//               into an allow-list (--allow-keys) or is given as --server-key.
//
//   allow-list  (--allow-keys FILE_OR_DIR) public keys a server accepts: a FILE holds one Z85
//               key per line (a .pub file is a one-line allow-list); a DIR holds such files
//               (every regular file not starting with '.', e.g. one PREFIX.pub per client).
//               Blank lines and '#' comments are ignored; anything after a key must be a
//               '#' comment.
//
// Z85 is ZeroMQ RFC 32 (implemented here, no libzmq dependency); CurveZMQ accepts 40-character
// Z85 keys directly in ZMQ_CURVE_{PUBLIC,SECRET,SERVER}KEY.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal::crypto {

inline constexpr size_t kCurveKeyBytes = 32;
inline constexpr size_t kSignPublicKeyBytes = 32;
inline constexpr size_t kSignSecretKeyBytes = 64;
inline constexpr size_t kZ85KeyChars = 40;  // Z85 of a 32-byte key

struct KeyPair {
  std::array<uint8_t, kCurveKeyBytes> curve_public{};
  std::array<uint8_t, kCurveKeyBytes> curve_secret{};
  std::array<uint8_t, kSignPublicKeyBytes> sign_public{};
  std::array<uint8_t, kSignSecretKeyBytes> sign_secret{};

  KeyPair() = default;
  KeyPair(const KeyPair&) = default;
  KeyPair& operator=(const KeyPair&) = default;
  KeyPair(KeyPair&&) = default;
  KeyPair& operator=(KeyPair&&) = default;
  ~KeyPair();  // wipes the secret keys

  bool operator==(const KeyPair& other) const;
};

// Z85 (ZeroMQ RFC 32). Encoding requires a length that is a multiple of 4.
StatusOr<std::string> Z85Encode(std::span<const uint8_t> bytes);
// Decoding requires a length that is a multiple of 5 and only Z85 characters.
StatusOr<std::vector<uint8_t>> Z85Decode(std::string_view text);
// Decodes into exactly `out.size()` bytes (text must be out.size() * 5 / 4 characters). On
// failure `out` is zeroed.
Status Z85DecodeTo(std::string_view text, std::span<uint8_t> out);
// Z85 of a 32-byte key: 40 characters.
std::string Z85Key(const std::array<uint8_t, kCurveKeyBytes>& key);

// A fresh X25519 (crypto_box_keypair) and Ed25519 (crypto_sign_keypair) key pair.
StatusOr<KeyPair> GenerateKeyPair();

// Writes PREFIX.key (mode 0600) and PREFIX.pub. Each file is written to a temporary file
// created with O_EXCL and mode 0600 in the same directory, fsynced, then moved into place
// atomically (without `force`: link(), which fails if the name exists; with `force`: rename()).
// Without `force`, refuses (naming the file) if either file exists and writes nothing.
Status WriteKeyFiles(const std::string& prefix, const KeyPair& keys, bool force);

// Reads and validates a PREFIX.key file: refuses a file that group or others can read or
// write, checks every field (labels, lengths, Z85 alphabet) and that each public key matches
// its secret key.
StatusOr<KeyPair> ReadSecretKeyFile(const std::string& path);

// `key_or_file` is either a 40-character Z85 public key or the path of a .pub file (its one
// non-comment line is the key); a path that exists is always read as a file, since a 40-character
// path can also be valid Z85 (e.g. "/tmp/shoal-it-12453-binding/keys/agg.pub"). Returns the
// validated 40-character Z85 key.
StatusOr<std::string> ReadPublicKey(const std::string& key_or_file);

// The public keys a CURVE server admits (see "allow-list" above). Immutable once loaded; a
// reload builds a new one.
class AllowList {
 public:
  // Reads FILE_OR_DIR. Every malformed line is an error naming the file and line; a secret key
  // file given by mistake is refused without echoing it. An empty list is valid here: the
  // caller decides whether that is acceptable.
  static StatusOr<AllowList> Load(const std::string& file_or_dir);
  // `key` is 40 Z85 characters, or the 32 raw bytes of a CURVE public key.
  bool Contains(std::string_view key) const;
  size_t size() const { return keys_.size(); }
  const std::set<std::string, std::less<>>& keys() const { return keys_; }  // Z85, 40 characters each
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::set<std::string, std::less<>> keys_;  // Z85, 40 characters each
};

}  // namespace shoal::crypto
