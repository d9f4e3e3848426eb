// The only place that calls libsodium (DESIGN.md §1).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

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
// `counter` (64 bytes each) into `out`. The expander of secure aggregation's masks and of the
// noise of differential privacy; the caller binds its context into the key or the nonce.
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

}  // namespace shoal::crypto
