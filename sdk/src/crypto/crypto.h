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

}  // namespace shoal::crypto
