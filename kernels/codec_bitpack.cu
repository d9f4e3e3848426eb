// Fixed-width bit packing, LSB first, as codec/bytes.cc: value i occupies stream bits
// [i*bits, (i+1)*bits). Pack: one thread per output byte; unpack: one thread per value.
#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {

__global__ void Pack(size_t n, int bits, const uint32_t* codes, uint8_t* out) {
  const size_t nbytes = (n * static_cast<size_t>(bits) + 7) / 8;
  SHOAL_GRID_LOOP(b, nbytes) {
    const size_t lo = 8 * b, hi = lo + 8;  // this byte's stream bits [lo, hi)
    uint32_t byte = 0;
    for (size_t i = lo / bits; i < n && i * bits < hi; ++i) {
      const size_t start = i * bits;  // value i's first stream bit
      const uint64_t v = codes[i];
      // Shift the value into this byte's frame: bit (start + j) lands at (start + j - lo).
      const uint64_t placed = start >= lo ? (v << (start - lo)) : (v >> (lo - start));
      byte |= static_cast<uint32_t>(placed & 0xffu);
    }
    out[b] = static_cast<uint8_t>(byte);
  }
}

__global__ void Unpack(size_t n, int bits, const uint8_t* in, uint32_t* codes) {
  const uint64_t mask = bits == 32 ? 0xffffffffULL : ((uint64_t{1} << bits) - 1);
  SHOAL_GRID_LOOP(i, n) {
    const size_t start = i * bits, first = start / 8, last = (start + bits - 1) / 8;
    uint64_t acc = 0;
    for (size_t b = first; b <= last; ++b) acc |= static_cast<uint64_t>(in[b]) << (8 * (b - first));
    codes[i] = static_cast<uint32_t>((acc >> (start % 8)) & mask);
  }
}

}  // namespace

void PackBits(Backend& backend, size_t n, int bits, const uint32_t* codes, uint8_t* out) {
  if (n == 0 || bits < 1 || bits > 32) return;
  Pack<<<GridFor((n * bits + 7) / 8), 256, 0, StreamFor(backend)>>>(n, bits, codes, out);
  SHOAL_CUDA_LAUNCHED();
}

void UnpackBits(Backend& backend, size_t n, int bits, const uint8_t* in, uint32_t* codes) {
  if (n == 0 || bits < 1 || bits > 32) return;
  Unpack<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, bits, in, codes);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
