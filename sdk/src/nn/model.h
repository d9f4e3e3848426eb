// The built-in models in one include: the model spec ("mlp:128,64"), the Mlp itself and
// Evaluate() over a dataset. Code that only needs one of them may include that header.
#pragma once

#include "nn/evaluate.h"    // IWYU pragma: export
#include "nn/mlp.h"         // IWYU pragma: export
#include "nn/model_spec.h"  // IWYU pragma: export
