// The held-out split of a token dataset (internal to sdk/src/data; partition.cc dispatches
// to it from TrainTestSplit). PartitionTokens, the other half, is public (shoal/data.h).
#pragma once

#include "shoal/data.h"
#include "shoal/status.h"

namespace shoal::data {

// OK when token dataset `d` keeps the invariants of shoal/data.h (tokens.size() == n, the
// feature fields empty, vocab_size 256, documents covering the stream); InvalidArgument
// naming the first broken one otherwise.
Status CheckTokens(const Dataset& d);

// TrainTestSplit for a token dataset: test = the last round(test_fraction * n) tokens, train
// = the rest (test_fraction already checked to lie in [0, 1)).
StatusOr<Split> SplitTokens(const Dataset& d, double test_fraction);

}  // namespace shoal::data
