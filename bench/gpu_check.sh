#!/usr/bin/env bash
# The one prepared run for a machine with a GPU (the device tool): the GPU tests (ctest label
# gpu: every backend op against the CPU reference, codec kernels against the host stages, a
# mixed CUDA/CPU federated run, the NCCL group and a client on every GPU), the backend
# benchmark, the GPT's step on the GPU (a 113M-parameter configuration in fp32 and bf16:
# tokens/s, model FLOP/s) and PyTorch's time for the same steps on the same GPU, then the
# data-parallel scaling over the machine's GPUs against PyTorch DDP's. Outputs go to $OUT (or
# build/).
#
#   bench/gpu_check.sh                 configure and build here with the CUDA backend required
#                                      (needs the CUDA toolkit and what scripts/setup installs)
#   bench/gpu_check.sh --pack DIR      build here, then pack the binaries, the libraries they
#                                      load that a bare CUDA machine lacks, and the digits data
#                                      into DIR/pack.tar.gz
#   bench/gpu_check.sh --packed DIR    run from such a pack, on a machine that has a GPU, the
#                                      CUDA toolkit's libraries and PyTorch but none of Shoal's
#                                      build dependencies (the device tool: carry DIR)
# The binaries have their build folder compiled in (integration tests start build/bin/*):
# --packed links that path to the unpacked pack when it does not exist there.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
targets=(shoal_cuda_tests backend_bench train_step_bench dp_scaling shoal-aggregator shoal-client)
mode="${1:-build}"
build_here() {
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHOAL_CUDA=ON >/dev/null
  cmake --build build -j "$(nproc)" --target "${targets[@]}" shoal-cuda
}
case "$mode" in
  --pack)
    dir="${2:?--pack DIR}"
    build_here
    stage="$(mktemp -d)"
    mkdir -p "$stage/bin" "$stage/lib" "$stage/deps" "$stage/data" "$dir"
    for t in "${targets[@]}"; do cp build/bin/"$t" "$stage/bin/"; done
    cp build/lib/libshoal-cuda.so "$stage/lib/"
    # Every library the binaries load but glibc, the C++ runtime and CUDA's own (the GPU
    # machine has newer ones of each).
    for t in "${targets[@]}"; do ldd build/bin/"$t"; done | awk '/=>/ {print $3}' | sort -u |
      grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s)\.so|/usr/local/cuda' |
      while read -r lib; do cp -L "$lib" "$stage/deps/"; done
    # NCCL, which the module links (the GPU machine's toolkit may lack it).
    ldd build/lib/libshoal-cuda.so | awk '/libnccl/ {print $3}' | while read -r lib; do cp -L "$lib" "$stage/deps/"; done
    data_dir="${SHOAL_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}"
    cp "$data_dir/digits.csv.gz" "$data_dir/kjv.txt" "$stage/data/"
    tar -C "$stage" -czf "$dir/pack.tar.gz" .
    rm -rf "$stage"
    echo "gpu_check: packed $(du -h "$dir/pack.tar.gz" | cut -f1) into $dir/pack.tar.gz"
    exit 0
    ;;
  --packed)
    dir="$(cd "${2:?--packed DIR}" && pwd)"
    mkdir -p "$dir/build"
    tar -C "$dir/build" -xzf "$dir/pack.tar.gz"
    built="$(grep -a -o -m1 '/[[:alnum:]/._-]*/build/bin' "$dir/build/bin/shoal_cuda_tests" | head -1 || true)"
    if [ -n "$built" ] && [ ! -e "${built%/bin}" ]; then
      mkdir -p "$(dirname "${built%/bin}")"
      ln -s "$dir/build" "${built%/bin}"
    fi
    bin="${built:-$dir/build/bin}"
    export LD_LIBRARY_PATH="$dir/build/deps:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # cuBLAS may live only inside a Python wheel (nvidia-cublas) on such a machine.
    if ldd "$bin/shoal_cuda_tests" | grep -q 'libcublas.*not found'; then
      cublas="$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1 || true)"
      [ -n "$cublas" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cublas")"
    fi
    export SHOAL_DATA_DIR="$dir/build/data"
    for t in "${targets[@]}"; do
      if ldd "$bin/$t" | grep 'not found'; then echo "gpu_check: $t misses the libraries above"; fi
    done
    ;;
  build)
    build_here
    bin="$root/build/bin"
    ;;
  *)
    echo "usage: bench/gpu_check.sh [--pack DIR | --packed DIR]" >&2
    exit 2
    ;;
esac
out="${OUT:-build}"
mkdir -p "$out"
nvidia-smi -L || true
set +e
# Bounded, so that a hang leaves the rest of a short lease to the benchmarks.
timeout 240 "$bin/shoal_cuda_tests" 2>&1 | tee "$out/gpu_tests.txt"
tests=${PIPESTATUS[0]}
# The kernels under compute-sanitizer's memcheck (out-of-bounds and misaligned accesses, leaks
# of device memory), where the machine's runtime lets it read the device.
if command -v compute-sanitizer >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  PATH="$PATH:/usr/local/cuda/bin" timeout 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
    "$bin/shoal_cuda_tests" --gtest_filter='CudaOps.*' 2>&1 | tail -n 40 | tee "$out/memcheck.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || tests=1
fi
OPENBLAS_NUM_THREADS=1 timeout 120 "$bin/backend_bench" 2>&1 | tee "$out/backend_bench.txt"
# The GPT's training step on the GPU: tokens/s (items_per_second) and model FLOP/s; MFU is
# model_flops over the GEMM peak backend_bench measured just before, in the same run.
SHOAL_BENCH_DEVICE=cuda timeout 180 "$bin/train_step_bench" --benchmark_filter=TrainStepGpu --benchmark_min_time=2 2>&1 | tee "$out/gpt_gpu_bench.txt"
# PyTorch's time for the same GPT steps on the same GPU (where python3 has torch with CUDA).
timeout 90 python3 bench/torch_train_step.py --device cuda 2>&1 | tee "$out/torch_gpu_bench.txt"
# Data-parallel scaling over this machine's GPUs (issue 19): the 113M GPT in bf16, 8 windows of
# 1,024 tokens per rank per step, on 1, 2, 4, ... GPUs (NCCL), then PyTorch DDP on the same.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
ranks=1
for ((r = 2; r <= ${gpus:-1}; r *= 2)); do ranks="$ranks,$r"; done
timeout 240 "$bin/dp_scaling" --device cuda --ranks "$ranks" --model gpt:layers=16,dim=768,heads=12,ctx=1024 \
  --dataset kjv --batch 8 --steps 10 --precision bf16 2>&1 | tee "$out/dp_scaling.txt"
timeout 240 python3 bench/torch_ddp_scaling.py --device cuda --ranks "$ranks" --layers 16 --dim 768 --heads 12 \
  --ctx 1024 --batch 8 --steps 10 --bf16 2>&1 | tee "$out/torch_ddp_scaling.txt"
exit "$tests"
