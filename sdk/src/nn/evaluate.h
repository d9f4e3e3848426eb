// Evaluate: mean loss and accuracy of a model's parameters on a whole dataset. The
// aggregator calls it on the held-out split after every round; the built-in trainer on a
// client's own part.
#pragma once

#include <numbers>
#include <span>

#include "nn/model.h"
#include "shoal/data.h"
#include "shoal/trainer.h"

namespace shoal::nn {

// Windows a token evaluation scores at most: 512 windows of ctx + 1 tokens (32,768 predicted
// tokens at ctx 64), evenly spaced over a longer stream, so that evaluating the KJV's held-out
// tail costs about a second per round on a CPU and every process scores the same tokens.
inline constexpr int64_t kMaxEvalWindows = 512;

// Runs `model` with `host_params` (host memory, Layout() order) over `data` (Model::ForwardLoss)
// and returns the mean loss, the accuracy and the number of examples scored:
//   features  every row, in Batches of `batch` rows; n = data.n
//   tokens    the windows of nn/token_windows.h EvalWindowStarts(n, max_seq_len,
//             kMaxEvalWindows), `batch` tokens per forward pass; the loss is in nats per token,
//             the accuracy that of the next token, n the tokens predicted
// An empty dataset gives {0, 0, 0}; a token stream too short for one window, NaN with n = 0
// (and an error logged). If the parameters, the
// data's kind or shape or its labels do not fit the model, logs an error and returns
// loss = accuracy = NaN with n = 0 instead of reading out of bounds.
EvalResult Evaluate(Model& model, std::span<const float> host_params, const data::Dataset& data, int batch = 512);

// A token model's held-out loss in bits per byte (the metrics' test_bits_per_byte): nats per
// token / ln 2, tokens being bytes.
inline double BitsPerByte(double nats_per_token) { return nats_per_token / std::numbers::ln2; }

}  // namespace shoal::nn
