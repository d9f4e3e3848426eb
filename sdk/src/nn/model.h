// Model: the interface every built-in model implements (DESIGN.md §3 "Model"). The aggregator,
// the peer, the built-in trainer and Evaluate() see only this; nn/model_registry.h builds one
// from its spec string ("mlp:128,64", "linear"; next "gpt:...").
//
// Parameters live in ONE flat arena in Layout() order; a model does not own them. Every pointer
// the compute methods take is in the backend's memory space, and `params` / `grads` are whole
// arenas. A model owns only scratch buffers (activations and their gradients), resized when a
// call needs a bigger batch, so it is not thread-safe: use one model per thread. The backend a
// model was made with must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/loss.h"
#include "shoal/arena.h"

namespace shoal::nn {

// What a model reads from a Batch.
enum class BatchKind {
  kFeatures,  // dense feature rows with one class label each (tabular data: mlp, linear)
  kTokens,    // token-id sequences with their next tokens (language models: gpt)
};

// "features" | "tokens", for messages.
inline const char* BatchKindName(BatchKind kind) { return kind == BatchKind::kTokens ? "tokens" : "features"; }

// One minibatch: views into backend memory, owned by the caller, that must stay valid for the
// call. Only the fields of `kind` are read.
struct Batch {
  BatchKind kind = BatchKind::kFeatures;
  int rows = 0;  // examples in the batch: feature rows, or token sequences
  // kFeatures: features[rows, input_dim] row-major and labels[rows] in [0, num_classes).
  const float* features = nullptr;
  const int32_t* labels = nullptr;
  // kTokens: tokens[rows, seq_len] row-major, ids in [0, vocab_size), and in `labels`
  // [rows, seq_len] each position's target: the token that follows it.
  const int32_t* tokens = nullptr;
  int seq_len = 0;

  static Batch Features(const float* features, const int32_t* labels, int rows) {
    Batch b;
    b.kind = BatchKind::kFeatures;
    b.rows = rows;
    b.features = features;
    b.labels = labels;
    return b;
  }
  static Batch Tokens(const int32_t* tokens, const int32_t* targets, int rows, int seq_len) {
    Batch b;
    b.kind = BatchKind::kTokens;
    b.rows = rows;
    b.tokens = tokens;
    b.labels = targets;
    b.seq_len = seq_len;
    return b;
  }
};

// The shape of the data a model is built for (MakeModel takes it; the model reports it back).
struct ModelInputs {
  int64_t input_dim = 0;    // features per example (kFeatures)
  int32_t num_classes = 0;  // label classes (kFeatures)
  int32_t vocab_size = 0;   // token ids lie in [0, vocab_size) (kTokens); 0 when the data has none
  bool operator==(const ModelInputs&) const = default;
};

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The canonical spec string ("mlp" gives "mlp:64"): MakeModel(spec(), inputs(), backend)
  // builds a model with the same layout and the same Init bytes. A task carries this string.
  virtual std::string spec() const = 0;
  // The data shape the model was built for.
  virtual ModelInputs inputs() const = 0;
  // What the batches given to ForwardBackward / ForwardLoss must hold.
  virtual BatchKind batch_kind() const = 0;
  // kTokens: the longest sequence a batch may hold (the model's context); 0 for kFeatures.
  virtual int max_seq_len() const { return 0; }
  virtual Backend* backend() const = 0;

  // The parameter layout, in arena order.
  virtual std::vector<TensorSpec> Layout() const = 0;
  // Total number of parameters (LayoutSize(Layout())).
  virtual size_t num_params() const = 0;
  // Fills *host_params (host memory; reset to Layout() if it has another layout) with the
  // model's initial parameters, drawn from shoal::Rng(seed): the same seed gives the same bytes
  // on every platform.
  virtual void Init(ParameterArena* host_params, uint64_t seed) const = 0;

  // Mixed precision: the matrix products round their operands to `p` and accumulate in fp32;
  // parameters, activations and gradients stay fp32 (the "master" copy). Default: fp32.
  virtual void set_precision(Precision p) = 0;
  virtual Precision precision() const = 0;

  // One training pass over `batch` (of kind batch_kind(); the caller checks that and the
  // ranges of its labels or ids): forward, loss, backward. OVERWRITES the gradient arena
  // `grads` with loss_scale * d(mean loss over the batch)/d(params) (loss_scale > 1 keeps
  // small fp16 gradients from flushing to zero; the caller unscales; 1 otherwise). An empty
  // batch gives a zero gradient. Returns, on the host, the summed (not mean) loss and the
  // number of correct predictions.
  virtual LossSums ForwardBackward(const float* params, const Batch& batch, float* grads, float loss_scale) = 0;

  // The forward pass and the loss, without gradients (evaluation). Returns as ForwardBackward.
  virtual LossSums ForwardLoss(const float* params, const Batch& batch) = 0;

  // Data-parallel ranks (nn/data_parallel.h, GradientBuckets): called during ForwardBackward,
  // on its thread, each time a range [offset, offset + count) of the gradient arena is final
  // (its backward work enqueued on the backend), as the backward pass finishes them, from the
  // arena's end towards its start. Ranges never announced are final when ForwardBackward
  // returns. Empty (the default): nothing is called.
  using GradientReady = std::function<void(size_t offset, size_t count)>;
  void set_gradient_ready(GradientReady ready) { gradient_ready_ = std::move(ready); }

 protected:
  Model() = default;
  void AnnounceGradient(size_t offset, size_t count) const {
    if (gradient_ready_) gradient_ready_(offset, count);
  }

 private:
  GradientReady gradient_ready_;
};

}  // namespace shoal::nn
