// Elementwise activations of the hidden layers, forward and backward, through Backend ops.
#pragma once

#include <cstddef>
#include <string>

#include "backend/backend.h"
#include "shoal/status.h"

namespace shoal::nn {

enum class Activation {
  kRelu,  // max(x, 0)
  kGelu,  // exact GELU, x * Phi(x) with erf (PyTorch's default approximate='none')
};

// "relu" | "gelu"; InvalidArgument otherwise.
StatusOr<Activation> ParseActivation(const std::string& name);
const char* ActivationName(Activation a);

// y = f(x) over n elements. y may not alias x.
void ActivationForward(Backend* backend, Activation a, size_t n, const float* x, float* y);
// dx = f'(x) * dy over n elements, where x is the forward INPUT (pre-activation).
void ActivationBackward(Backend* backend, Activation a, size_t n, const float* x, const float* dy, float* dx);

}  // namespace shoal::nn
