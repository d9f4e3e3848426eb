#include "crypto/crypto.h"

#include <sodium.h>

#include <bit>
#include <cstdio>
#include <cstdlib>

namespace shoal::crypto {

static_assert(std::endian::native == std::endian::little, "the wire format assumes a little-endian host");

void EnsureInit() {
  static const bool ok = [] { return sodium_init() >= 0; }();
  if (!ok) {
    std::fputs("shoal: libsodium failed to initialize\n", stderr);
    std::abort();
  }
}

std::string HashHex(std::span<const uint8_t> bytes) {
  EnsureInit();
  std::array<unsigned char, crypto_generichash_BYTES> digest{};
  crypto_generichash(digest.data(), digest.size(), bytes.data(), bytes.size(), nullptr, 0);
  std::string hex(digest.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  hex.pop_back();
  return hex;
}

std::string ModelHash(std::span<const float> params) {
  return HashHex({reinterpret_cast<const uint8_t*>(params.data()), params.size_bytes()});
}

uint64_t RandomU64() {
  EnsureInit();
  uint64_t v = 0;
  randombytes_buf(&v, sizeof v);
  return v;
}

}  // namespace shoal::crypto
