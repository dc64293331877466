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
# one trivial kernel first: where numba-cuda cannot compile at all, say why once, not per test
# (numba-cuda 0.30.4 registers np.row_stack, which NumPy 2.5 removed)
set -o pipefail
python3 - <<'EOF' 2>&1 | tee -a "$OUT/versions.txt" || exit 1
import sys
import numpy as np
from numba import cuda
try:
    cuda.jit("void(float32[:])")(lambda a: None)
except Exception as e:
    hint = (f"; NumPy {np.__version__} has no np.row_stack: install numpy<2.5"
            if "row_stack" in str(e) else "")
    sys.exit(f"numba-cuda cannot compile a kernel here: {type(e).__name__}: {e}{hint}")
EOF
set +o pipefail
# every test that runs on the cuda device (tests/cuda, and the device-parametrised tests of the
# other modules), tests/cuda last: its PTX check reads the kernels the run built
timeout "${TEST_SECONDS:-300}" python3 -m pytest -q -p no:cacheprovider -n 0 -k cuda \
  tests/ops/test_activation.py tests/ops/test_binding.py tests/ops/test_seeds.py \
  tests/ops/test_lp_pooling.py tests/test_kernel_corners.py tests/test_graph_rules.py \
  tests/test_registry.py tests/unit/test_layers.py tests/cuda 2>&1 | tee "$OUT/cuda_tests.txt" | tail -25
timeout "${BENCH_SECONDS:-200}" python3 -m benchmarks.bench_cnn --device cuda ${BENCH_ARGS:-} \
  2>&1 | grep -v Warning | tee "$OUT/bench_cnn_cuda.txt"
timeout "${STEPS_SECONDS:-120}" python3 -m benchmarks.bench_cnn --device cuda --steps \
  --models resnet18 --batches 1 2>&1 | grep -v Warning | tee "$OUT/bench_cnn_steps.txt"
