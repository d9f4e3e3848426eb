#include "crypto/crypto.h"

#include <sodium.h>

#include <algorithm>
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

std::array<uint8_t, 32> Hash256(std::span<const uint8_t> bytes) {
  EnsureInit();
  std::array<uint8_t, 32> digest{};
  crypto_generichash(digest.data(), digest.size(), bytes.data(), bytes.size(), nullptr, 0);
  return digest;
}

std::string ToHex(std::span<const uint8_t> bytes) {
  std::string hex(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes.data(), bytes.size());
  hex.pop_back();
  return hex;
}

std::string HashHex(std::span<const uint8_t> bytes) { return ToHex(Hash256(bytes)); }

std::string ModelHash(std::span<const float> params) {
  return HashHex({reinterpret_cast<const uint8_t*>(params.data()), params.size_bytes()});
}

Signature Sign(std::span<const uint8_t> message, std::span<const uint8_t, 64> secret_key) {
  EnsureInit();
  Signature sig{};
  crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), secret_key.data());
  return sig;
}

bool Verify(const Signature& signature, std::span<const uint8_t> message, std::span<const uint8_t, 32> public_key) {
  EnsureInit();
  return crypto_sign_verify_detached(signature.data(), message.data(), message.size(), public_key.data()) == 0;
}

uint64_t RandomU64() {
  EnsureInit();
  uint64_t v = 0;
  randombytes_buf(&v, sizeof v);
  return v;
}

void RandomBytes(std::span<uint8_t> out) {
  EnsureInit();
  randombytes_buf(out.data(), out.size());
}

void ChaCha20(const StreamKey& key, const StreamNonce& nonce, uint32_t counter, std::span<uint8_t> out) {
  static_assert(crypto_stream_chacha20_ietf_KEYBYTES == 32 && crypto_stream_chacha20_ietf_NONCEBYTES == 12);
  EnsureInit();
  std::fill(out.begin(), out.end(), uint8_t{0});
  crypto_stream_chacha20_ietf_xor_ic(out.data(), out.data(), out.size(), nonce.data(), counter, key.data());
}

}  // namespace shoal::crypto
