// DeMo, decoupled momentum optimization (Peng, Quesnelle, Kingma et al. 2024), client side.
//
// Each client keeps a momentum m (one float per parameter) for the whole task: it survives
// from round to round, because the part of m that is not sent (the residual) is the point of
// the method. One Step with gradient g:
//   g' = g + weight_decay * w                 (L2 into the momentum, see below)
//   m  = demo_decay * m + g'
//   for each tensor t of the layout (viewed as rows x cols, codec::ToShape2D):
//     q_t = IDCT(topk_per_chunk(DCT(m_t)))     codec "dct:chunk=demo_chunk", then top-k
//                                              "topk:k=demo_topk" (exact) within each DCT chunk
//   m  = m - q                                 (the residual stays local)
//   Q  = Q + q                                 (this round's extracted components)
//   w  = w - lr * sign(q)                      (sign(0) = 0; the local model moves like DeMo's)
// The clients send -Q (TrainResult.delta; for one local step per round that is exactly -q, the
// published DDP-like setting), the aggregator's "demo" strategy averages them and applies
// global = global + lr * sign(mean(-Q)) = global - lr * sign(mean Q), DeMo's update with the
// all-gather replaced by the round's upload.
//
// Weight decay: the paper decays the weights decoupled (w *= 1 - lr * wd). Here only -Q reaches
// the global model, so a decay applied to the local weights alone would be lost; it is added to
// the gradient instead (it flows through m and the extraction into the update).
//
// The DCT and the top-k are the codec stages' own (sdk/src/codec/dct.cc, topk.cc), run on the
// host: Step copies w and g from the backend, updates, and copies w back (a no-op copy on the
// CPU backend). m and Q live in host memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "nn/optimizer.h"

namespace shoal::nn {

class DemoOptimizer final : public Optimizer {
 public:
  // Use MakeDemoOptimizer, which validates the config and the layout first.
  DemoOptimizer(const OptimizerConfig& config, const std::vector<TensorSpec>& layout, Backend* backend,
                std::unique_ptr<codec::Transform> dct, std::unique_ptr<codec::Selector> topk);

  void Step(float* w, const float* g) override;
  // Zeroes the momentum, the round's extracted sum and the step count (a new task).
  void Reset() override;
  std::string name() const override { return "demo"; }
  // The step count and the momentum (what lives from one round to the next).
  std::vector<float> SaveState() const override;
  Status LoadState(std::span<const float> state) override;

  // Starts a round: zeroes the extracted sum Q and keeps the momentum.
  void BeginRound();
  // Host views (size() floats each): the momentum m (the residual after the last Step), the
  // sum Q of the components extracted since BeginRound/Reset, and the last Step's q.
  std::span<const float> momentum() const { return m_; }
  std::span<const float> extracted() const { return acc_; }
  std::span<const float> last_extracted() const { return q_; }

 private:
  struct Tensor {
    codec::Shape2D shape;
    size_t offset = 0;
    size_t size = 0;
    size_t chunk = 0;  // DCT coefficients per chunk (top-k is per chunk of this many)
  };

  float decay_;
  float weight_decay_;
  std::vector<Tensor> tensors_;
  std::unique_ptr<codec::Transform> dct_;
  std::unique_ptr<codec::Selector> topk_;
  std::vector<float> m_, acc_, q_;       // momentum, round sum of q, last q
  std::vector<float> w_host_, g_host_;   // staging copies of the backend arrays
  std::vector<float> coeffs_, sparse_;   // per-tensor scratch
  std::vector<uint32_t> indices_;
};

// Checks the config (ValidateOptimizerConfig, name must be "demo") and the layout (no negative
// dimension, every tensor below 2^32 values), then builds a DeMo optimizer with zero momentum
// over the LayoutSize(layout) parameters of `layout`, in arena order, on `backend` (which must
// outlive it). MakeOptimizer("demo", n, ...) is this with the arena as one vector of n.
StatusOr<std::unique_ptr<DemoOptimizer>> MakeDemoOptimizer(const OptimizerConfig& config,
                                                           const std::vector<TensorSpec>& layout, Backend* backend);

}  // namespace shoal::nn
