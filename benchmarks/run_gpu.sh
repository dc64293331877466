#!/usr/bin/env bash
# The checks that need a GPU, in one go (a machine with an NVIDIA GPU, numba-cuda, PyTorch,
# onnx and ONNX Runtime; run from the repository's root): every CUDA test on the hardware,
# then the CNN benchmark on the GPU and ResNet-18 step by step. Logs and tables go to $OUT
# (default ./gpu-results).
set -u
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  python3 -c "import sys, numba, numpy, torch; from numba import cuda; print(sys.version.split()[0], 'numba', numba.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__); print(cuda.get_current_device().name)"
} 2>&1 | tee "$OUT/versions.txt"
timeout "${TEST_SECONDS:-300}" python3 -m pytest -q -p no:cacheprovider -n 0 tests/cuda \
  2>&1 | tee "$OUT/cuda_tests.txt" | tail -25
timeout "${BENCH_SECONDS:-200}" python3 -m benchmarks.bench_cnn --device cuda ${BENCH_ARGS:-} \
  2>&1 | grep -v Warning | tee "$OUT/bench_cnn_cuda.txt"
timeout "${STEPS_SECONDS:-120}" python3 -m benchmarks.bench_cnn --device cuda --steps \
  --models resnet18 --batches 1 2>&1 | grep -v Warning | tee "$OUT/bench_cnn_steps.txt"
