// Secure aggregation's arithmetic: fixed-point encoding of updates into Z_2^32, and masks
// expanded from 256-bit keys with ChaCha20.
//
// Fixed point. A value is clipped to [-R, R] (R = --secagg-range, explicit: a value outside
// is counted and reported as the round's clip rate, never silently wrapped), scaled by
// s = (2^31 - 1 - m) / (m R) for at most m summands and rounded to the nearest integer, and
// stored mod 2^32. The sum of m encodings stays within (-2^31, 2^31), so reading it as a
// signed 32-bit integer and dividing by s gives the sum of the clipped values to within m / (2s)
// per coordinate (R = 1, m = 100: 2.4e-6). Encoding is IEEE double arithmetic with
// round-to-nearest: the same bits on every machine.
//
// Masks. A key's mask is the ChaCha20 keystream (nonce 0: every key is used for one round and
// one pair, binding both into the key) read as little-endian uint32 words and added (or, for
// the higher-indexed end of a pair, subtracted) mod 2^32, so each pair's masks cancel in the sum.
#pragma once

#include <cstdint>
#include <span>

#include "crypto/crypto.h"

namespace shoal::privacy::secagg {

struct FixedPoint {
  double range = 0.0;  // R
  double scale = 0.0;  // s
  uint32_t bits = 32;
  // bits 32: s = (2^31 - 1 - m) / (m R + headroom); headroom (in value units) is room for
  // noise added after clipping (distributed DP). bits 16: int8 levels, s = 127 / R, which
  // needs m * 127 + headroom * s < 2^15 (Fits says whether it does).
  FixedPoint(double range, uint32_t max_summands, uint32_t bits = 32, double headroom = 0.0);
  bool Fits(uint32_t max_summands, double headroom = 0.0) const;
};

// The room, in value units, for the sum's distributed DP noise: each of up to m survivors adds
// a share of variance (z C)^2 / t (calibrated to the threshold t, the fewest a sum can have), so
// the sum's noise has standard deviation z C sqrt(m / t) at most; 8 of those.
double NoiseHeadroom(uint32_t m, uint32_t threshold, double dp_clip, double noise_multiplier);

// The encoding of a round with m clients and threshold t (0: t = m): with distributed DP, room
// for NoiseHeadroom, and (32 bits) a scale of at most 2^24 / (z C), since finer steps drown in
// the noise; this keeps each client's share of the noise, a discrete Gaussian of variance
// (z C s)^2 / t, below 2^48.
FixedPoint RoundEncoding(double range, uint32_t m, uint32_t bits, double dp_clip = 0.0, double noise_multiplier = 0.0,
                         uint32_t threshold = 0);

// out[i] = encoding of x[i]; returns how many values were outside [-R, R] (clipped) or not finite.
uint64_t EncodeFixed(const FixedPoint& fp, std::span<const float> x, std::span<uint32_t> out);
// out[i] = sum[i] read as a signed `bits`-bit integer, / s.
void DecodeFixedSum(const FixedPoint& fp, std::span<const uint32_t> sum, std::span<double> out);

struct MaskKey {
  crypto::Key32 key;
  bool subtract = false;
};
// v += sum over keys of (subtract ? -1 : 1) * ChaCha20(key) mod 2^32, word by word. Block by
// block (64 KiB of v at a time, every key's keystream for that block), so v is read and
// written once whatever the number of keys.
void ApplyMasks(std::span<const MaskKey> keys, std::span<uint32_t> v);

}  // namespace shoal::privacy::secagg
