#!/usr/bin/env bash
# The one prepared run for a machine with a GPU (the device tool): configure with the CUDA
# backend required, build only what the check needs, run the GPU tests (ctest label gpu,
# every backend op against the CPU reference, codec kernels against the host stages, a mixed
# CUDA/CPU federated run), the backend benchmark and the GPT's step on the GPU (a 113M-parameter
# configuration in fp32 and bf16: tokens/s, model FLOP/s), and leave the outputs in $OUT (or
# build/). It assumes the packages scripts/setup installs are already there.
#   bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-build}"
mkdir -p "$out"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
nvidia-smi -L || true
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHOAL_CUDA=ON >/dev/null
cmake --build build -j "$(nproc)" --target shoal_cuda_tests backend_bench train_step_bench shoal-aggregator shoal-client
set +e
build/bin/shoal_cuda_tests 2>&1 | tee "$out/gpu_tests.txt"
tests=${PIPESTATUS[0]}
OPENBLAS_NUM_THREADS=1 build/bin/backend_bench 2>&1 | tee "$out/backend_bench.txt"
# The GPT's training step on the GPU: tokens/s (items_per_second) and model FLOP/s; MFU is
# model_flops over the GEMM peak backend_bench measured just before, in the same run.
SHOAL_BENCH_DEVICE=cuda build/bin/train_step_bench --benchmark_filter=TrainStepGpu 2>&1 | tee "$out/gpt_gpu_bench.txt"
exit "$tests"
