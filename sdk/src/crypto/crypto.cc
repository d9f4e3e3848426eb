#include "crypto/crypto.h"

#include <openssl/evp.h>
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

std::optional<std::array<uint8_t, 32>> SignToCurvePublic(std::span<const uint8_t, 32> sign_public) {
  EnsureInit();
  std::array<uint8_t, 32> out{};
  if (crypto_sign_ed25519_pk_to_curve25519(out.data(), sign_public.data()) != 0) return std::nullopt;
  return out;
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

namespace {

[[noreturn]] void CipherFailed(const char* what) {
  std::fprintf(stderr, "shoal: OpenSSL's ChaCha20 failed (%s)\n", what);
  std::abort();
}

// One cipher context per thread, re-keyed by each call.
struct CipherContext {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherContext() { EVP_CIPHER_CTX_free(ctx); }
};

}  // namespace

// OpenSSL's ChaCha20 (EVP_chacha20: AVX-512, AVX2 and NEON bodies, 2.3x libsodium's here) is
// the RFC 8439 keystream: its 16-byte IV is the 32-bit block counter (little-endian) and the
// 96-bit nonce, so the bits are libsodium's crypto_stream_chacha20_ietf_xor_ic's
// (CryptoTest.ChaCha20IsTheIetfKeystreamOfLibsodium). The keystream is the encryption of zeros.
void ChaCha20(const StreamKey& key, const StreamNonce& nonce, uint32_t counter, std::span<uint8_t> out) {
  static constexpr size_t kZeros = size_t{1} << 16;
  static const std::array<uint8_t, kZeros> zeros{};
  thread_local CipherContext c;
  std::array<uint8_t, 16> iv{};
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<uint8_t>(counter >> (8 * i));
  std::copy(nonce.begin(), nonce.end(), iv.begin() + 4);
  if (!c.ctx || EVP_EncryptInit_ex(c.ctx, EVP_chacha20(), nullptr, key.data(), iv.data()) != 1) CipherFailed("init");
  for (size_t off = 0; off < out.size(); off += kZeros) {
    const int n = static_cast<int>(std::min(kZeros, out.size() - off));
    int len = 0;
    if (EVP_EncryptUpdate(c.ctx, out.data() + off, &len, zeros.data(), n) != 1 || len != n) CipherFailed("update");
  }
}

X25519Pair NewX25519() {
  EnsureInit();
  X25519Pair p;
  crypto_box_keypair(p.public_key.data(), p.secret_key.data());
  return p;
}

bool ValidX25519Public(const Key32& public_key) {
  EnsureInit();
  static const Key32 probe = [] {  // any scalar: libsodium refuses a product that is all zero
    Key32 k{};
    k[0] = 0x58;
    k[31] = 0x40;
    return k;
  }();
  Key32 out{};
  return crypto_scalarmult(out.data(), probe.data(), public_key.data()) == 0;
}

Key32 X25519Public(const Key32& secret_key) {
  EnsureInit();
  Key32 pk{};
  crypto_scalarmult_base(pk.data(), secret_key.data());
  return pk;
}

bool AgreeKey(const Key32& secret_key, const Key32& my_public, const Key32& their_public,
              std::span<const uint8_t> context, Key32& out) {
  EnsureInit();
  Key32 point{};
  if (crypto_scalarmult(point.data(), secret_key.data(), their_public.data()) != 0) return false;
  const bool mine_first = std::lexicographical_compare(my_public.begin(), my_public.end(), their_public.begin(),
                                                       their_public.end());
  const Key32& lo = mine_first ? my_public : their_public;
  const Key32& hi = mine_first ? their_public : my_public;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, out.size());
  crypto_generichash_update(&st, point.data(), point.size());
  crypto_generichash_update(&st, lo.data(), lo.size());
  crypto_generichash_update(&st, hi.data(), hi.size());
  crypto_generichash_update(&st, context.data(), context.size());
  crypto_generichash_final(&st, out.data(), out.size());
  sodium_memzero(point.data(), point.size());
  return true;
}

std::vector<uint8_t> Seal(const Key32& key, std::span<const uint8_t> ad, std::span<const uint8_t> plaintext) {
  EnsureInit();
  constexpr size_t kNonce = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  std::vector<uint8_t> out(kNonce + plaintext.size() + crypto_aead_xchacha20poly1305_ietf_ABYTES);
  randombytes_buf(out.data(), kNonce);
  unsigned long long len = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + kNonce, &len, plaintext.data(), plaintext.size(), ad.data(),
                                             ad.size(), nullptr, out.data(), key.data());
  out.resize(kNonce + len);
  return out;
}

bool Open(const Key32& key, std::span<const uint8_t> ad, std::span<const uint8_t> sealed, std::vector<uint8_t>& plaintext) {
  EnsureInit();
  constexpr size_t kNonce = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  plaintext.clear();
  if (sealed.size() < kNonce + crypto_aead_xchacha20poly1305_ietf_ABYTES) return false;
  plaintext.resize(sealed.size() - kNonce - crypto_aead_xchacha20poly1305_ietf_ABYTES);
  unsigned long long len = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(plaintext.data(), &len, nullptr, sealed.data() + kNonce,
                                                 sealed.size() - kNonce, ad.data(), ad.size(), sealed.data(),
                                                 key.data()) != 0) {
    plaintext.clear();
    return false;
  }
  plaintext.resize(len);
  return true;
}

}  // namespace shoal::crypto
