// Windows of a token stream as language-model batches: a window of seq + 1 consecutive tokens
// gives seq inputs (its first seq tokens) and seq targets (its last seq: each position's next
// token). Training draws windows at uniformly random starts; evaluation reads fixed, evenly
// spaced ones, so every process scores the same tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "shoal/data.h"

namespace shoal::nn {

// Windows of `seq` + 1 tokens that fit in a stream of n tokens (0 when n <= seq).
inline int64_t WindowCount(int64_t n, int seq) { return n > seq ? n - seq : 0; }

// `rows` windows drawn from `rng` out of token dataset `d` (which must hold WindowCount > 0),
// widened to int32 into tokens[rows * seq] and targets[rows * seq].
void DrawWindows(const data::Dataset& d, int rows, int seq, Rng& rng, int32_t* tokens, int32_t* targets);

// The starts of at most `max_windows` windows for evaluation: back to back (stride seq) from
// token 0, or, when more would fit, `max_windows` evenly spaced over the stream.
std::vector<int64_t> EvalWindowStarts(int64_t n, int seq, int64_t max_windows);

// The window at `start` into tokens[seq] and targets[seq].
void CopyWindow(const data::Dataset& d, int64_t start, int seq, int32_t* tokens, int32_t* targets);

}  // namespace shoal::nn
