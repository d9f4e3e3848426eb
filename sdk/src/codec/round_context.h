// The codec randomness of one round, derived the same way by the aggregator and every client.
#pragma once

#include <cstdint>
#include <string>

#include "codec/codec.h"
#include "core/rng.h"

namespace shoal::codec {

// shared_seed depends only on (task seed, round), so every party of the round agrees on it
// (random-k coordinates); private_seed is the encoder's own (QSGD, stochastic rounding).
inline RoundContext MakeRoundContext(uint64_t task_seed, uint64_t round, uint64_t private_seed) {
  RoundContext ctx;
  ctx.round = round;
  ctx.shared_seed = Rng(task_seed ^ 0x5ea4ed5eedULL, round).NextU64();
  ctx.private_seed = Rng(private_seed, round).NextU64();
  return ctx;
}

// An encoder's private seed from its name: FNV-1a, portable (std::hash differs between
// standard libraries).
inline uint64_t NameSeed(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace shoal::codec
