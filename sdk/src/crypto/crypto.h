// The only place that calls libsodium (DESIGN.md §1).
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shoal::crypto {

// Initializes libsodium once (thread-safe); aborts the process if it cannot, since every
// later call would be unsafe.
void EnsureInit();

// BLAKE2b-256 of `bytes`, as 64 lowercase hex characters.
std::string HashHex(std::span<const uint8_t> bytes);
// The model hash of DESIGN.md §6: BLAKE2b-256 of the parameters' little-endian float32 bytes.
std::string ModelHash(std::span<const float> params);

// Uniformly random 64-bit value from the OS CSPRNG (session ids).
uint64_t RandomU64();
// Fills `out` from the OS CSPRNG (keys, noise seeds).
void RandomBytes(std::span<uint8_t> out);

// ChaCha20 (RFC 8439, 96-bit nonce) keystream: writes the stream of (key, nonce) from block
// `counter` (64 bytes each) into `out`, which must end before block 2^32 (256 GiB). The
// expander of secure aggregation's masks and of the noise of differential privacy; the caller
// binds its context into the key or the nonce. Thread-safe.
using StreamKey = std::array<uint8_t, 32>;
using StreamNonce = std::array<uint8_t, 12>;
void ChaCha20(const StreamKey& key, const StreamNonce& nonce, uint32_t counter, std::span<uint8_t> out);

// Lowercase hex of `bytes`.
std::string ToHex(std::span<const uint8_t> bytes);

// BLAKE2b-256 of `bytes` (raw digest).
std::array<uint8_t, 32> Hash256(std::span<const uint8_t> bytes);

// Ed25519 (RFC 8032) detached signatures: secret_key is libsodium's 64-byte form (seed ||
// public key), as shoal-keygen stores it.
using Signature = std::array<uint8_t, 64>;
Signature Sign(std::span<const uint8_t> message, std::span<const uint8_t, 64> secret_key);
bool Verify(const Signature& signature, std::span<const uint8_t> message, std::span<const uint8_t, 32> public_key);
// The X25519 form of an Ed25519 public key (crypto_sign_ed25519_pk_to_curve25519); nullopt for
// a key that is not a valid point. A key file whose CURVE pair was derived from its Ed25519
// pair (GenerateKeyPair) has curve_public == SignToCurvePublic(sign_public).
std::optional<std::array<uint8_t, 32>> SignToCurvePublic(std::span<const uint8_t, 32> sign_public);

// X25519 for secure aggregation's per-round keys (libsodium crypto_box keys).
using Key32 = std::array<uint8_t, 32>;
struct X25519Pair {
  Key32 public_key{};
  Key32 secret_key{};
};
X25519Pair NewX25519();
// False for a low-order point (agreement with it gives the all-zero secret).
bool ValidX25519Public(const Key32& public_key);
Key32 X25519Public(const Key32& secret_key);
// BLAKE2b-256(X25519(secret, their_public) || min(pk) || max(pk) || context): the same 32-byte
// key on both sides, bound to both public keys and to `context`. False when their_public is a
// low-order point (the shared point would be all zero).
bool AgreeKey(const Key32& secret_key, const Key32& my_public, const Key32& their_public,
              std::span<const uint8_t> context, Key32& out);

// XChaCha20-Poly1305 (IETF): Seal returns nonce (24 random bytes) || ciphertext || tag;
// Open returns false (and leaves `plaintext` empty) on any tampering or a wrong key or AD.
std::vector<uint8_t> Seal(const Key32& key, std::span<const uint8_t> ad, std::span<const uint8_t> plaintext);
bool Open(const Key32& key, std::span<const uint8_t> ad, std::span<const uint8_t> sealed, std::vector<uint8_t>& plaintext);

}  // namespace shoal::crypto
