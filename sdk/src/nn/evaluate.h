// Evaluate: mean loss and accuracy of a model's parameters on a whole dataset. The
// aggregator calls it on the held-out split after every round; the built-in trainer on a
// client's own part.
#pragma once

#include <span>

#include "nn/model.h"
#include "shoal/data.h"
#include "shoal/trainer.h"

namespace shoal::nn {

// Runs `model` with `host_params` (host memory, Layout() order) over `data` in features
// Batches of `batch` rows (Model::ForwardLoss) and returns the mean loss, the accuracy and
// n = data.n. An empty dataset gives {0, 0, 0}. If the parameters, the data's shape or its
// labels do not fit the model (or the model or the data is not of features), logs an error and
// returns loss = accuracy = NaN with n = 0 instead of reading out of bounds.
EvalResult Evaluate(Model& model, std::span<const float> host_params, const data::Dataset& data, int batch = 512);

}  // namespace shoal::nn
