// Shamir t-of-n secret sharing of 32-byte secrets (secure aggregation's mask keys and
// self-mask seeds) over the prime field GF(p), p = 2^61 - 1.
//
// Algorithm. The secret is cut into 8 little-endian 32-bit words; each word w is the constant
// term of its own random polynomial f of degree t - 1 over GF(p) (coefficients uniform in
// [0, p) from the OS CSPRNG, by rejection), and the share of the party at x (1 <= x < 2^31) is
// (f_1(x), ..., f_8(x)). Any t shares determine each word by Lagrange interpolation at 0;
// t - 1 shares are independent of the secret (every word value is equally likely).
// Constant time: field arithmetic is branch-free on secret values (64x64 -> 128-bit products,
// Mersenne reduction, masked final subtraction); only the public x's steer control flow.
// Wire form of a share: 8 x uint64 little endian (64 bytes); x travels as the holder's index.
//
// Refuses: t = 0 or t > number of holders, x = 0 or repeated, and on Combine fewer than t
// shares, a share value >= p, or a reconstructed word >= 2^32 (shares that do not come from one
// secret: a forged or corrupted share is detected unless the forger knows the polynomial).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "shoal/status.h"

namespace shoal::privacy::secagg {

using Secret = std::array<uint8_t, 32>;

struct Share {
  uint32_t x = 0;                   // the holder's evaluation point, >= 1
  std::array<uint64_t, 8> y{};      // one field element per 32-bit word of the secret
};

inline constexpr uint64_t kFieldPrime = (uint64_t{1} << 61) - 1;

// One share per x in `xs`, threshold t.
StatusOr<std::vector<Share>> SplitSecret(const Secret& secret, uint32_t threshold, std::span<const uint32_t> xs);
// The secret from exactly the first `threshold` of `shares` (more are ignored).
StatusOr<Secret> CombineShares(std::span<const Share> shares, uint32_t threshold);

// 64-byte wire form.
std::array<uint8_t, 64> EncodeShareY(const Share& s);
StatusOr<Share> DecodeShareY(uint32_t x, std::span<const uint8_t> bytes);

}  // namespace shoal::privacy::secagg
