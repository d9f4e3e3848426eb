// The model registry: builds a Model (nn/model.h) from the spec string of a `--model` flag or
// a task's `model` field (DESIGN.md §6). It dispatches on the kind, the text before the first
// ':', and the kind parses the rest itself:
//
//   "mlp", "mlp:H1,H2,...[,act=relu|gelu]"  multi-layer perceptron (nn/mlp.h; grammar in nn/model_spec.h)
//   "linear"                                 softmax regression: the MLP without a hidden layer
//   "gpt", "gpt:layers=L,dim=D,heads=H,ctx=T" GPT-style decoder on token data (nn/gpt.h; grammar in nn/gpt_spec.h)
//
// A new kind adds one factory to the table in model_registry.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/model.h"
#include "shoal/data.h"
#include "shoal/status.h"

namespace shoal::nn {

// The kinds MakeModel knows, sorted: "gpt", "linear", "mlp".
std::vector<std::string> ModelKinds();

// The model `spec` names, for data of shape `inputs`, computing on `backend` (which must
// outlive it). Its spec() is the canonical form of `spec` ("mlp" gives "mlp:64"). Errors are
// InvalidArgument: an unknown kind (the message names the known ones), or what the kind's
// own parser and constructor say about the rest of the spec, the shape or a null backend.
StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& spec, const ModelInputs& inputs, Backend* backend);

// The shape a model for `data` is built for: its feature count and its classes (features),
// or its vocabulary (tokens: input_dim and num_classes 0).
ModelInputs InputsOf(const data::Dataset& data);

}  // namespace shoal::nn
