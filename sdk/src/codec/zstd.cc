// zstd (stage "zstd", StageId::kZstd, slot pack): the whole body of a payload (everything after
// its header) compressed as one zstd frame at `level`. Lossless: no error of its own.
// Wire: one zstd frame with its content size declared, nothing after it.
// Unpack refuses anything but exactly one frame, a frame without a declared content size or
// declaring more than the layout's largest valid body, and a frame that does not decompress to
// exactly its declared size; it allocates only the declared (bounded) size.
#include <zstd.h>

#include <cstring>
#include <string>

#include "codec/stages.h"

namespace shoal::codec {
namespace {

constexpr ParamDecl kParams[] = {
    IntParam("level", 3, 1, 19, "zstd compression level"),
};

class Zstd final : public Packer {
 public:
  explicit Zstd(int level) : level_(level) {}
  StageId id() const override { return StageId::kZstd; }

  Status Pack(std::span<const uint8_t> body, std::vector<uint8_t>* out) const override {
    const size_t start = out->size();
    out->resize(start + ZSTD_compressBound(body.size()));
    const size_t n = ZSTD_compress(out->data() + start, out->size() - start, body.data(), body.size(), level_);
    if (ZSTD_isError(n)) return Status::Internal(std::string("codec: zstd compression failed: ") + ZSTD_getErrorName(n));
    out->resize(start + n);
    return Status::Ok();
  }

  Status Unpack(std::span<const uint8_t> packed, size_t max_body, std::vector<uint8_t>* body) const override {
    const size_t frame = ZSTD_findFrameCompressedSize(packed.data(), packed.size());
    if (ZSTD_isError(frame) || frame != packed.size()) {
      return Status::Corruption("codec payload: not exactly one zstd frame");
    }
    const unsigned long long declared = ZSTD_getFrameContentSize(packed.data(), packed.size());
    if (declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR) {
      return Status::Corruption("codec payload: zstd frame without a content size");
    }
    if (declared > max_body) {
      return Status::Corruption("codec payload: zstd frame declares " + std::to_string(declared) +
                                " bytes, the layout allows at most " + std::to_string(max_body));
    }
    body->assign(static_cast<size_t>(declared), 0);
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    if (!dctx) return Status::Internal("codec: out of memory for a zstd context");
    const size_t got = ZSTD_decompressDCtx(dctx, body->data(), body->size(), packed.data(), packed.size());
    ZSTD_freeDCtx(dctx);
    if (ZSTD_isError(got) || got != body->size()) {
      return Status::Corruption(std::string("codec payload: zstd frame does not decompress: ") +
                                (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "size mismatch"));
    }
    return Status::Ok();
  }

 private:
  int level_;
};

StatusOr<std::unique_ptr<Packer>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Packer>(std::make_unique<Zstd>(static_cast<int>(p.Int("level"))));
}

}  // namespace

constinit const StageDecl kZstdStage = {
    .name = "zstd", .id = StageId::kZstd, .slot = Slot::kPack,
    .summary = "lossless zstd compression of the whole body",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
