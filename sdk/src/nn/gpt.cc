#include "nn/gpt.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "nn/loss.h"

namespace shoal::nn {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int32_t kMaxVocab = 1 << 20;

}  // namespace

StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptSpec& spec, int32_t vocab_size, Backend* backend) {
  const std::string name = GptSpecToString(spec);
  if (backend == nullptr) return Status::InvalidArgument("model '" + name + "': no backend");
  if (vocab_size < 2 || vocab_size > kMaxVocab)
    return Status::InvalidArgument("model '" + name + "' needs token data with a vocabulary of 2.." +
                                   std::to_string(kMaxVocab) + " ids; the data has " + std::to_string(vocab_size) +
                                   (vocab_size == 0 ? " (a features dataset: use --dataset kjv or text:PATH)" : ""));
  if (spec.layers < 1 || spec.heads < 1 || spec.ctx < 1 || spec.dim < 1 || spec.dim % spec.heads != 0)
    return Status::InvalidArgument("model '" + name + "': bad shape");
  return std::unique_ptr<Gpt>(new Gpt(spec, vocab_size, backend));
}

Gpt::Gpt(const GptSpec& spec, int32_t vocab, Backend* backend) : spec_(spec), vocab_(vocab), backend_(backend) {
  const size_t d = static_cast<size_t>(spec_.dim);
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t offset = at;
    at += n;
    return offset;
  };
  auto linear = [&](int in, int out) {
    const size_t w = take(static_cast<size_t>(in) * out);
    return Linear(in, out, w, take(static_cast<size_t>(out)));
  };
  tok_emb_ = take(static_cast<size_t>(vocab_) * d);
  pos_emb_ = take(static_cast<size_t>(spec_.ctx) * d);
  const int D = spec_.dim;
  for (int l = 0; l < spec_.layers; ++l) {
    const size_t ln1_w = take(d), ln1_b = take(d);
    Linear qkv = linear(D, 3 * D), proj = linear(D, D);
    const size_t ln2_w = take(d), ln2_b = take(d);
    Linear fc = linear(D, 4 * D), mlp_proj = linear(4 * D, D);
    blocks_.push_back({ln1_w, ln1_b, ln2_w, ln2_b, qkv, proj, fc, mlp_proj});
  }
  lnf_w_ = take(d);
  lnf_b_ = take(d);
  num_params_ = at;
}

std::vector<TensorSpec> Gpt::Layout() const {
  const int64_t D = spec_.dim;
  std::vector<TensorSpec> layout = {{"tok_emb.weight", {vocab_, D}}, {"pos_emb.weight", {spec_.ctx, D}}};
  for (int l = 0; l < spec_.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    for (const TensorSpec& t : std::vector<TensorSpec>{{h + "ln1.weight", {D}},
                                                       {h + "ln1.bias", {D}},
                                                       {h + "attn.qkv.weight", {D, 3 * D}},
                                                       {h + "attn.qkv.bias", {3 * D}},
                                                       {h + "attn.proj.weight", {D, D}},
                                                       {h + "attn.proj.bias", {D}},
                                                       {h + "ln2.weight", {D}},
                                                       {h + "ln2.bias", {D}},
                                                       {h + "mlp.fc.weight", {D, 4 * D}},
                                                       {h + "mlp.fc.bias", {4 * D}},
                                                       {h + "mlp.proj.weight", {4 * D, D}},
                                                       {h + "mlp.proj.bias", {D}}})
      layout.push_back(t);
  }
  layout.push_back({"ln_f.weight", {D}});
  layout.push_back({"ln_f.bias", {D}});
  return layout;
}

void Gpt::Init(ParameterArena* host_params, uint64_t seed) const {
  const std::vector<TensorSpec> layout = Layout();
  if (host_params->Layout() != layout) *host_params = ParameterArena(layout);
  Rng rng(seed);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(spec_.layers));
  for (size_t t = 0; t < layout.size(); ++t) {
    const std::string& name = layout[t].name;
    auto values = host_params->tensor(t);
    const bool bias = name.ends_with(".bias");
    const bool norm = name.find("ln") != std::string::npos && name.ends_with(".weight");
    const float std = name.ends_with("proj.weight") ? residual_std : 0.02f;
    for (float& v : values) v = bias ? 0.0f : norm ? 1.0f : static_cast<float>(std * rng.Normal());
  }
}

size_t Gpt::ActivationBytes(int rows, int seq) const {
  const size_t n = static_cast<size_t>(rows) * seq, d = static_cast<size_t>(spec_.dim);
  const size_t per_block = n * (d /*ln1*/ + 3 * d /*qkv*/ + d /*att*/ + d /*mid*/ + d /*ln2*/ + 8 * d /*fc, gelu*/ + 4) +
                           Shape(rows, seq).probs_size();
  const size_t blocks = spec_.checkpoint ? 1 : static_cast<size_t>(spec_.layers);
  const size_t inputs = n * d * (spec_.layers + 1);
  const size_t head = n * (d + 2 + 2 * static_cast<size_t>(vocab_));
  return sizeof(float) * (inputs + blocks * per_block + head);
}

void Gpt::Reserve(int rows, int seq) {
  const size_t tokens = static_cast<size_t>(rows) * seq, probs = Shape(rows, seq).probs_size();
  if (tokens <= tokens_ && probs <= probs_) return;
  tokens_ = std::max(tokens, tokens_);
  probs_ = std::max(probs, probs_);
  const size_t n = tokens_, d = static_cast<size_t>(spec_.dim);
  Backend* be = backend_;
  xs_.clear();
  for (int l = 0; l <= spec_.layers; ++l) xs_.emplace_back(be, n * d);
  acts_.clear();
  for (int l = 0; l < (spec_.checkpoint ? 1 : spec_.layers); ++l) {
    Acts a;
    a.ln1 = DeviceArray<float>(be, n * d);
    a.mean1 = DeviceArray<float>(be, n);
    a.rstd1 = DeviceArray<float>(be, n);
    a.qkv = DeviceArray<float>(be, 3 * n * d);
    a.probs = DeviceArray<float>(be, probs_);
    a.att = DeviceArray<float>(be, n * d);
    a.mid = DeviceArray<float>(be, n * d);
    a.ln2 = DeviceArray<float>(be, n * d);
    a.mean2 = DeviceArray<float>(be, n);
    a.rstd2 = DeviceArray<float>(be, n);
    a.fc = DeviceArray<float>(be, 4 * n * d);
    a.gelu = DeviceArray<float>(be, 4 * n * d);
    acts_.push_back(std::move(a));
  }
  lnf_ = DeviceArray<float>(be, n * d);
  meanf_ = DeviceArray<float>(be, n);
  rstdf_ = DeviceArray<float>(be, n);
  logits_ = DeviceArray<float>(be, n * vocab_);
  dlogits_ = DeviceArray<float>(be, n * vocab_);
  dx_ = DeviceArray<float>(be, n * d);
  dtmp_ = DeviceArray<float>(be, n * d);
  dtmp2_ = DeviceArray<float>(be, n * d);
  dbig_ = DeviceArray<float>(be, 4 * n * d);
  dprobs_ = DeviceArray<float>(be, probs_);
}

void Gpt::BlockForward(const float* params, int l, int rows, int seq, Acts* a) {
  const Block& b = blocks_[l];
  const int n = rows * seq, D = spec_.dim;
  const float* x = xs_[l].get();
  float* out = xs_[l + 1].get();
  backend_->LayerNorm(n, D, x, params + b.ln1_w, params + b.ln1_b, kLayerNormEps, a->ln1.get(), a->mean1.get(),
                      a->rstd1.get());
  b.qkv.Forward(backend_, params, a->ln1.get(), n, a->qkv.get(), precision_);
  CausalAttentionForward(backend_, Shape(rows, seq), a->qkv.get(), a->probs.get(), a->att.get(), precision_);
  b.proj.Forward(backend_, params, a->att.get(), n, a->mid.get(), precision_);
  backend_->Axpy(static_cast<size_t>(n) * D, 1.0f, x, a->mid.get());  // mid = x + attention
  backend_->LayerNorm(n, D, a->mid.get(), params + b.ln2_w, params + b.ln2_b, kLayerNormEps, a->ln2.get(),
                      a->mean2.get(), a->rstd2.get());
  b.fc.Forward(backend_, params, a->ln2.get(), n, a->fc.get(), precision_);
  // GELU's derivative replaces its input, which the backward pass needs no longer.
  backend_->GeluWithDerivative(static_cast<size_t>(n) * 4 * D, a->fc.get(), a->gelu.get(), a->fc.get());
  b.mlp_proj.Forward(backend_, params, a->gelu.get(), n, out, precision_);
  backend_->Axpy(static_cast<size_t>(n) * D, 1.0f, a->mid.get(), out);  // out = mid + mlp
}

void Gpt::Forward(const float* params, const int32_t* tokens, int rows, int seq) {
  const int n = rows * seq, D = spec_.dim;
  float* x0 = xs_[0].get();
  backend_->EmbeddingGather(n, D, params + tok_emb_, tokens, x0);
  for (int r = 0; r < rows; ++r)
    backend_->Axpy(static_cast<size_t>(seq) * D, 1.0f, params + pos_emb_, x0 + static_cast<size_t>(r) * seq * D);
  for (int l = 0; l < spec_.layers; ++l) BlockForward(params, l, rows, seq, &ActsOf(l));
  backend_->LayerNorm(n, D, xs_[spec_.layers].get(), params + lnf_w_, params + lnf_b_, kLayerNormEps, lnf_.get(),
                      meanf_.get(), rstdf_.get());
  backend_->GemmEx(false, true, n, vocab_, D, 1.0f, lnf_.get(), params + tok_emb_, 0.0f, logits_.get(), precision_);
}

void Gpt::BlockBackward(const float* params, int l, int rows, int seq, const Acts& a, float* grads, float* dx) {
  const Block& b = blocks_[l];
  const int n = rows * seq, D = spec_.dim;
  const size_t nd = static_cast<size_t>(n) * D;
  // out = mid + mlp_proj(gelu(fc(ln2(mid)))): dx holds dL/dout, which is also the residual's share of dL/dmid.
  b.mlp_proj.Backward(backend_, params, a.gelu.get(), dx, n, grads, dbig_.get(), precision_);
  backend_->Multiply(4 * nd, dbig_.get(), a.fc.get(), dbig_.get());  // a.fc holds GELU's derivative
  b.fc.Backward(backend_, params, a.ln2.get(), dbig_.get(), n, grads, dtmp_.get(), precision_);
  backend_->LayerNormBackward(n, D, a.mid.get(), params + b.ln2_w, a.mean2.get(), a.rstd2.get(), dtmp_.get(),
                              dtmp2_.get(), grads + b.ln2_w, grads + b.ln2_b);
  backend_->Axpy(nd, 1.0f, dtmp2_.get(), dx);  // dx = dL/dmid
  // mid = x + proj(attention(qkv(ln1(x)))).
  b.proj.Backward(backend_, params, a.att.get(), dx, n, grads, dtmp_.get(), precision_);
  CausalAttentionBackward(backend_, Shape(rows, seq), a.qkv.get(), a.probs.get(), dtmp_.get(), dprobs_.get(),
                          dbig_.get(), precision_);
  b.qkv.Backward(backend_, params, a.ln1.get(), dbig_.get(), n, grads, dtmp_.get(), precision_);
  backend_->LayerNormBackward(n, D, xs_[l].get(), params + b.ln1_w, a.mean1.get(), a.rstd1.get(), dtmp_.get(),
                              dtmp2_.get(), grads + b.ln1_w, grads + b.ln1_b);
  backend_->Axpy(nd, 1.0f, dtmp2_.get(), dx);  // dx = dL/dx
}

// A batch longer than the context would read past the position embeddings: refused here,
// whatever the caller checked.
bool Gpt::Fits(int seq) const {
  if (seq <= spec_.ctx) return true;
  spdlog::error("model {}: a batch of {} tokens per sequence exceeds the context of {}", spec(), seq, spec_.ctx);
  return false;
}

const float* Gpt::Logits(const float* params, const int32_t* tokens, int rows, int seq) {
  if (rows <= 0 || seq <= 0 || !Fits(seq)) return nullptr;
  Reserve(rows, seq);
  Forward(params, tokens, rows, seq);
  return logits_.get();
}

LossSums Gpt::ForwardLoss(const float* params, const Batch& batch) {
  const int rows = batch.rows, seq = batch.seq_len;
  if (rows <= 0 || seq <= 0) return {};
  if (!Fits(seq)) return {std::numeric_limits<double>::quiet_NaN(), 0};
  Reserve(rows, seq);
  Forward(params, batch.tokens, rows, seq);
  return SoftmaxCrossEntropy(backend_, rows * seq, vocab_, logits_.get(), batch.labels, nullptr);
}

LossSums Gpt::ForwardBackward(const float* params, const Batch& batch, float* grads, float loss_scale) {
  const int rows = batch.rows, seq = batch.seq_len;
  if (rows <= 0 || seq <= 0) {
    UploadZeros(backend_, grads, num_params_);  // no tokens: a zero gradient
    return {};
  }
  if (!Fits(seq)) return {std::numeric_limits<double>::quiet_NaN(), 0};
  Reserve(rows, seq);
  Forward(params, batch.tokens, rows, seq);
  const int n = rows * seq, D = spec_.dim;
  const LossSums sums = SoftmaxCrossEntropy(backend_, n, vocab_, logits_.get(), batch.labels, dlogits_.get());
  if (loss_scale != 1.0f) backend_->Scale(static_cast<size_t>(n) * vocab_, loss_scale, dlogits_.get());
  // logits = lnf tok_emb^T: the output's share of dL/dtok_emb (overwritten here; the input
  // embedding's share is added last), and dL/dlnf.
  backend_->GemmEx(true, false, vocab_, D, n, 1.0f, dlogits_.get(), lnf_.get(), 0.0f, grads + tok_emb_, precision_);
  backend_->GemmEx(false, false, n, D, vocab_, 1.0f, dlogits_.get(), params + tok_emb_, 0.0f, dtmp_.get(), precision_);
  backend_->LayerNormBackward(n, D, xs_[spec_.layers].get(), params + lnf_w_, meanf_.get(), rstdf_.get(), dtmp_.get(),
                              dx_.get(), grads + lnf_w_, grads + lnf_b_);
  AnnounceGradient(lnf_w_, num_params_ - lnf_w_);  // the final layer norm ends the arena
  for (int l = spec_.layers - 1; l >= 0; --l) {
    if (spec_.checkpoint) BlockForward(params, l, rows, seq, &acts_[0]);  // recompute from the kept input
    BlockBackward(params, l, rows, seq, ActsOf(l), grads, dx_.get());
    // A block's parameters are contiguous, from its first layer norm to its MLP's bias.
    const Block& b = blocks_[static_cast<size_t>(l)];
    AnnounceGradient(b.ln1_w, b.mlp_proj.bias_offset() + b.mlp_proj.out() - b.ln1_w);
  }
  // x0 = tok_emb[tokens] + pos_emb: every sequence adds into the position rows it used.
  const size_t sd = static_cast<size_t>(seq) * D, td = static_cast<size_t>(spec_.ctx) * D;
  float* dpos = grads + pos_emb_;
  backend_->CopyOnDevice(dpos, dx_.get(), sd * sizeof(float));
  for (int r = 1; r < rows; ++r) backend_->Axpy(sd, 1.0f, dx_.get() + r * sd, dpos);
  if (td > sd) {  // positions this batch did not reach
    if (zeros_.size() < td) {  // once: afterwards a copy on the device every step
      zeros_ = DeviceArray<float>(backend_, td);
      UploadZeros(backend_, zeros_.get(), td);
    }
    backend_->CopyOnDevice(dpos + sd, zeros_.get(), (td - sd) * sizeof(float));
  }
  backend_->EmbeddingScatterAdd(n, D, dx_.get(), batch.tokens, grads + tok_emb_);
  return sums;
}

}  // namespace shoal::nn
