// ModelSpec: the spec of the built-in MLP, as named by a `--model` flag or a task's `model`
// field (DESIGN.md §6). MakeModel (nn/model_registry.h) hands the "mlp" and "linear" kinds here.
//
//   "mlp"                  multi-layer perceptron with one hidden layer of 64 units, ReLU
//   "mlp:128,64"           hidden widths 128 then 64
//   "mlp:128,64,act=gelu"  same, with exact GELU activations ("relu" | "gelu")
//   "linear"               no hidden layer: softmax regression
//
// ModelSpecToString gives the canonical form ("mlp" -> "mlp:64"), which parses back to an
// equal spec.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal::nn {

struct ModelSpec {
  std::string kind;              // "mlp" | "linear"
  std::vector<int> hidden;       // hidden layer widths, input side first; empty for "linear"
  std::string activation = "relu";  // "relu" | "gelu" (ignored when there is no hidden layer)
  bool operator==(const ModelSpec&) const = default;
};

// The hidden widths of a bare "mlp".
inline constexpr int kDefaultHiddenWidth = 64;
// The widest hidden layer a spec may ask for (keeps every GEMM dimension well inside int).
inline constexpr int kMaxHiddenWidth = 1 << 20;
// The deepest MLP a spec may ask for.
inline constexpr size_t kMaxHiddenLayers = 64;

// Parses a model spec; InvalidArgument that quotes the spec and says what was expected.
StatusOr<ModelSpec> ParseModelSpec(const std::string& text);

// The canonical spec string: "linear", "mlp:128,64" or "mlp:128,64,act=gelu".
std::string ModelSpecToString(const ModelSpec& spec);

}  // namespace shoal::nn
