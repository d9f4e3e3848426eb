#include "privacy/secagg/shamir.h"

#include <cstring>
#include <set>

#include "crypto/crypto.h"

namespace shoal::privacy::secagg {
namespace {

constexpr uint64_t P = kFieldPrime;
__extension__ typedef unsigned __int128 U128;  // GCC/Clang's 128-bit integers

// x < p (or x < 2p before the final step): branch-free reduction of x mod p.
inline uint64_t Reduce(uint64_t x) {
  const uint64_t t = x - P;
  const uint64_t keep = static_cast<uint64_t>(static_cast<int64_t>(t) >> 63);  // all ones if x < p
  return (t & ~keep) | (x & keep);
}
inline uint64_t Add(uint64_t a, uint64_t b) { return Reduce(a + b); }
inline uint64_t Sub(uint64_t a, uint64_t b) { return Reduce(a + P - b); }
inline uint64_t Mul(uint64_t a, uint64_t b) {
  const U128 prod = static_cast<U128>(a) * b;  // < 2^122
  const uint64_t lo = static_cast<uint64_t>(prod) & P;
  const uint64_t hi = static_cast<uint64_t>(prod >> 61);                  // < 2^61
  return Reduce(lo + hi);
}
// a^(p-2): the inverse of a != 0 (the exponent is public; the loop does not depend on a).
uint64_t Inverse(uint64_t a) {
  uint64_t result = 1, base = a, e = P - 2;
  for (int i = 0; i < 61; ++i) {
    const uint64_t m = Mul(result, base);
    const uint64_t bit = 0 - ((e >> i) & 1);
    result = (m & bit) | (result & ~bit);
    base = Mul(base, base);
  }
  return result;
}

uint64_t RandomElement() {
  for (;;) {
    uint64_t v = crypto::RandomU64() & P;  // 61 bits; p itself is rejected
    if (v != P) return v;
  }
}

}  // namespace

StatusOr<std::vector<Share>> SplitSecret(const Secret& secret, uint32_t t, std::span<const uint32_t> xs) {
  if (t == 0 || t > xs.size())
    return Status::InvalidArgument("Shamir: threshold " + std::to_string(t) + " for " + std::to_string(xs.size()) +
                                   " holders");
  std::set<uint32_t> seen;
  for (uint32_t x : xs)
    if (x == 0 || x >= (1u << 31) || !seen.insert(x).second)
      return Status::InvalidArgument("Shamir: evaluation points must be distinct and in [1, 2^31)");
  std::vector<Share> shares(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) shares[i].x = xs[i];
  std::vector<uint64_t> coef(t);
  for (int w = 0; w < 8; ++w) {
    uint32_t word;
    std::memcpy(&word, secret.data() + 4 * w, 4);
    coef[0] = word;
    for (uint32_t c = 1; c < t; ++c) coef[c] = RandomElement();
    for (auto& s : shares) {  // Horner
      uint64_t y = 0;
      for (uint32_t c = t; c-- > 0;) y = Add(Mul(y, s.x), coef[c]);
      s.y[w] = y;
    }
  }
  std::fill(coef.begin(), coef.end(), 0);
  return shares;
}

StatusOr<Secret> CombineShares(std::span<const Share> shares, uint32_t t) {
  if (t == 0 || shares.size() < t)
    return Status::InvalidArgument("Shamir: " + std::to_string(shares.size()) + " shares, threshold " +
                                   std::to_string(t));
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < t; ++i) {
    if (shares[i].x == 0 || !seen.insert(shares[i].x).second)
      return Status::InvalidArgument("Shamir: repeated or zero evaluation point");
    for (uint64_t y : shares[i].y)
      if (y >= P) return Status::InvalidArgument("Shamir: share value outside the field");
  }
  // Lagrange basis at 0: l_i = prod_{j != i} x_j / (x_j - x_i).
  std::vector<uint64_t> basis(t);
  for (uint32_t i = 0; i < t; ++i) {
    uint64_t num = 1, den = 1;
    for (uint32_t j = 0; j < t; ++j) {
      if (j == i) continue;
      num = Mul(num, shares[j].x);
      den = Mul(den, Sub(shares[j].x, shares[i].x));
    }
    basis[i] = Mul(num, Inverse(den));
  }
  Secret secret{};
  uint64_t too_large = 0;
  for (int w = 0; w < 8; ++w) {
    uint64_t v = 0;
    for (uint32_t i = 0; i < t; ++i) v = Add(v, Mul(basis[i], shares[i].y[w]));
    too_large |= v >> 32;
    const uint32_t word = static_cast<uint32_t>(v);
    std::memcpy(secret.data() + 4 * w, &word, 4);
  }
  if (too_large) return Status::InvalidArgument("Shamir: the shares do not belong to one secret");
  return secret;
}

std::array<uint8_t, 64> EncodeShareY(const Share& s) {
  std::array<uint8_t, 64> out{};
  std::memcpy(out.data(), s.y.data(), 64);  // little-endian host (crypto.cc asserts it)
  return out;
}

StatusOr<Share> DecodeShareY(uint32_t x, std::span<const uint8_t> bytes) {
  if (bytes.size() != 64) return Status::InvalidArgument("Shamir: a share is 64 bytes");
  Share s;
  s.x = x;
  std::memcpy(s.y.data(), bytes.data(), 64);
  for (uint64_t y : s.y)
    if (y >= P) return Status::InvalidArgument("Shamir: share value outside the field");
  return s;
}

}  // namespace shoal::privacy::secagg
