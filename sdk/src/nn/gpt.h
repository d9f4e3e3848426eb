// Gpt: a GPT-style decoder-only transformer language model (GPT-2's shape) behind Model
// (nn/model.h), over BatchKind::kTokens batches; spec grammar in nn/gpt_spec.h.
//
//   x = tok_emb[tokens] + pos_emb[0..seq)
//   per block:  x = x + proj(attention(qkv(ln1(x))))        causal multi-head (nn/attention.h)
//               x = x + mlp.proj(gelu(mlp.fc(ln2(x))))       exact GELU, 4*dim wide
//   logits = ln_f(x) tok_emb^T                               output embedding tied to the input one
//   loss = mean softmax cross-entropy of each position against its next token
//
// Parameters live in ONE flat arena in Layout() order; weights are stored [in, out] (x W):
//   tok_emb.weight[V, D] pos_emb.weight[T, D]
//   per block l: h{l}.ln1.weight[D] h{l}.ln1.bias[D] h{l}.attn.qkv.weight[D, 3D] h{l}.attn.qkv.bias[3D]
//                h{l}.attn.proj.weight[D, D] h{l}.attn.proj.bias[D] h{l}.ln2.weight[D] h{l}.ln2.bias[D]
//                h{l}.mlp.fc.weight[D, 4D] h{l}.mlp.fc.bias[4D] h{l}.mlp.proj.weight[4D, D] h{l}.mlp.proj.bias[D]
//   ln_f.weight[D] ln_f.bias[D]
// Init is GPT-2's: N(0, 0.02) weights and embeddings, N(0, 0.02/sqrt(2L)) for the two
// projections into the residual stream, zero biases, unit LayerNorm gains.
//
// Activation memory per token per block is about (16 D + heads * seq) floats; with
// checkpointing (spec ckpt=1) a block keeps only its input (D floats) and is recomputed in
// the backward pass, which gives bit-identical gradients for about one more forward pass.
// Pointers, ownership and threading as for every Model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/attention.h"
#include "nn/gpt_spec.h"
#include "nn/linear.h"
#include "nn/model.h"
#include "shoal/status.h"

namespace shoal::nn {

class Gpt final : public Model {
 public:
  // Validates the spec against the vocabulary (2..2^20 token ids); `backend` must outlive it.
  static StatusOr<std::unique_ptr<Gpt>> Create(const GptSpec& spec, int32_t vocab_size, Backend* backend);

  std::string spec() const override { return GptSpecToString(spec_); }
  ModelInputs inputs() const override { return {0, 0, vocab_}; }
  BatchKind batch_kind() const override { return BatchKind::kTokens; }
  int max_seq_len() const override { return spec_.ctx; }
  Backend* backend() const override { return backend_; }
  std::vector<TensorSpec> Layout() const override;
  size_t num_params() const override { return num_params_; }
  void Init(ParameterArena* host_params, uint64_t seed) const override;
  void set_precision(Precision p) override { precision_ = p; }
  Precision precision() const override { return precision_; }

  // On a kTokens batch of `rows` sequences of seq_len <= ctx tokens: the summed loss over
  // every position and the positions whose argmax logit is the next token. A longer batch is
  // refused: a NaN loss (and no gradient), with an error logged.
  LossSums ForwardBackward(const float* params, const Batch& batch, float* grads, float loss_scale) override;
  LossSums ForwardLoss(const float* params, const Batch& batch) override;

  const GptSpec& gpt_spec() const { return spec_; }
  // The forward pass alone: logits [rows * seq, vocab] (backend memory, valid until the next
  // call on this model) of `rows` sequences of seq <= ctx tokens (sampling, tests).
  const float* Logits(const float* params, const int32_t* tokens, int rows, int seq);
  // Bytes of activations kept between the forward and the backward pass for `rows` sequences
  // of `seq` tokens (what checkpointing saves; scratch that lives only inside a block excluded).
  size_t ActivationBytes(int rows, int seq) const;

 private:
  // One block's tensors: where they sit in the arena.
  struct Block {
    size_t ln1_w, ln1_b, ln2_w, ln2_b;
    Linear qkv, proj, fc, mlp_proj;
  };
  // One block's saved activations for `capacity` tokens.
  // `fc` holds the MLP's pre-activation, then (GeluWithDerivative) GELU's derivative there.
  struct Acts {
    DeviceArray<float> ln1, mean1, rstd1, qkv, probs, att, mid, ln2, mean2, rstd2, fc, gelu;
  };

  Gpt(const GptSpec& spec, int32_t vocab, Backend* backend);
  void Reserve(int rows, int seq);
  // Embeddings into xs_[0], then every block (keeping activations unless checkpointing), the
  // final norm and the logits.
  void Forward(const float* params, const int32_t* tokens, int rows, int seq);
  void BlockForward(const float* params, int l, int rows, int seq, Acts* a);
  // dx: dL/d(block output) in, dL/d(block input) out.
  void BlockBackward(const float* params, int l, int rows, int seq, const Acts& a, float* grads, float* dx);
  bool Fits(int seq) const;  // seq <= ctx, else logs why
  AttentionShape Shape(int rows, int seq) const { return {rows, seq, spec_.heads, spec_.head_dim()}; }
  Acts& ActsOf(int l) { return acts_[spec_.checkpoint ? 0 : l]; }

  GptSpec spec_;
  int32_t vocab_;
  Backend* backend_;
  Precision precision_ = Precision::kFp32;
  size_t tok_emb_ = 0, pos_emb_ = 0, lnf_w_ = 0, lnf_b_ = 0, num_params_ = 0;
  std::vector<Block> blocks_;

  // Scratch, in backend memory: activations for `tokens_` tokens, attention for `probs_` scores.
  size_t tokens_ = 0, probs_ = 0;
  std::vector<DeviceArray<float>> xs_;  // xs_[l]: the input of block l; xs_[L]: the last block's output
  std::vector<Acts> acts_;              // one per block, or one shared when checkpointing
  DeviceArray<float> lnf_, meanf_, rstdf_, logits_, dlogits_;
  DeviceArray<float> dx_, dtmp_, dtmp2_, dbig_, dprobs_;
  DeviceArray<float> zeros_;            // zeros for the position-gradient rows beyond seq (ctx * dim)
};

}  // namespace shoal::nn
