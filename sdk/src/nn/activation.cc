#include "nn/activation.h"

namespace shoal::nn {

StatusOr<Activation> ParseActivation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  return Status::InvalidArgument("unknown activation '" + name + "': expected relu or gelu");
}

const char* ActivationName(Activation a) { return a == Activation::kRelu ? "relu" : "gelu"; }

void ActivationForward(Backend* backend, Activation a, size_t n, const float* x, float* y) {
  switch (a) {
    case Activation::kRelu: backend->Relu(n, x, y); return;
    case Activation::kGelu: backend->Gelu(n, x, y); return;
  }
}

void ActivationBackward(Backend* backend, Activation a, size_t n, const float* x, const float* dy, float* dx) {
  switch (a) {
    case Activation::kRelu: backend->ReluBackward(n, x, dy, dx); return;
    case Activation::kGelu: backend->GeluBackward(n, x, dy, dx); return;
  }
}

}  // namespace shoal::nn
