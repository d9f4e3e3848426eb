#include "nn/model_registry.h"

#include "nn/gpt.h"
#include "nn/mlp.h"
#include "nn/model_spec.h"

namespace shoal::nn {
namespace {

using ModelFactory = StatusOr<std::unique_ptr<Model>> (*)(const std::string& spec, const ModelInputs& inputs,
                                                          Backend* backend);

StatusOr<std::unique_ptr<Model>> MakeMlp(const std::string& spec, const ModelInputs& inputs, Backend* backend) {
  if (inputs.vocab_size > 0 && inputs.input_dim == 0)
    return Status::InvalidArgument("model '" + spec + "' takes features (rows with class labels), but the dataset "
                                   "holds tokens (byte-level text, vocabulary " + std::to_string(inputs.vocab_size) +
                                   "): use a language model (gpt)");
  SHOAL_ASSIGN_OR_RETURN(ModelSpec parsed, ParseModelSpec(spec));
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp, Mlp::Create(parsed, inputs.input_dim, inputs.num_classes, backend));
  return std::unique_ptr<Model>(std::move(mlp));
}

StatusOr<std::unique_ptr<Model>> MakeGpt(const std::string& spec, const ModelInputs& inputs, Backend* backend) {
  SHOAL_ASSIGN_OR_RETURN(GptSpec parsed, ParseGptSpec(spec));
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(parsed, inputs.vocab_size, backend));
  return std::unique_ptr<Model>(std::move(gpt));
}

struct Registration {
  const char* kind;
  ModelFactory make;
};

// Sorted by kind.
constexpr Registration kModels[] = {
    {"gpt", MakeGpt},
    {"linear", MakeMlp},
    {"mlp", MakeMlp},
};

}  // namespace

std::vector<std::string> ModelKinds() {
  std::vector<std::string> kinds;
  for (const Registration& r : kModels) kinds.emplace_back(r.kind);
  return kinds;
}

StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& spec, const ModelInputs& inputs, Backend* backend) {
  const std::string kind = spec.substr(0, spec.find(':'));
  for (const Registration& r : kModels)
    if (kind == r.kind) return r.make(spec, inputs, backend);
  std::string known;
  for (const Registration& r : kModels) known += std::string(known.empty() ? "" : ", ") + r.kind;
  return Status::InvalidArgument("bad model spec '" + spec + "': unknown model kind '" + kind +
                                 "'; known kinds: " + known);
}

ModelInputs InputsOf(const data::Dataset& data) {
  ModelInputs inputs;
  inputs.input_dim = data.dim;
  inputs.num_classes = data.num_classes;
  inputs.vocab_size = data.vocab_size;
  return inputs;
}

}  // namespace shoal::nn
