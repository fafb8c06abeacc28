#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and no network, install ember from this checkout,
# run the GPU test subset (CUDA, and WebGPU over the Vulkan driver where one is installed) and
# benchmarks/bench_gpu.py, and write everything to the directory given as the argument.
#
#   bash benchmarks/gpu_check.sh OUTDIR
#
# Python packages come from the machine, or from wheels carried with the checkout in
# $EMBER_GPU_WHEELS (default benchmarks/wheels; fill it on a networked machine with
# `pip download -d benchmarks/wheels wgpu "cuda-bindings>=12,<13" nvidia-cuda-nvrtc-cu12 nvidia-cublas-cu12`;
# cuBLAS is also found in the wheel PyTorch or CuPy installed, or in the CUDA toolkit).
# Bounded to about 9 minutes in all. Written without a GPU at hand: not yet run on one.
set -uo pipefail
OUT=${1:?usage: bash benchmarks/gpu_check.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WHEELS=${EMBER_GPU_WHEELS:-benchmarks/wheels}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
start=$(date +%s)

{
    date -u
    nvidia-smi || echo "nvidia-smi: not found"
    python -V
    python -m pip install --no-index --no-deps --no-build-isolation -e . || echo "editable install failed"
    if [ -d "$WHEELS" ]; then
        python -m pip install --no-index --find-links "$WHEELS" wgpu "cuda-bindings>=12,<13" \
            nvidia-cuda-nvrtc-cu12 || echo "wheel install failed"
        python -m pip install --no-index --find-links "$WHEELS" nvidia-cublas-cu12 \
            || echo "no cuBLAS wheel carried (the machine's cuBLAS is used where found)"
    fi
    python -m pip list 2>/dev/null | grep -i -E "wgpu|cuda|nvrtc|cupy|torch|jax" || true
} > "$OUT/install.log" 2>&1

timeout 60 python - > "$OUT/devices.txt" 2>&1 <<'PY'
import ember
from ember._src.jit import BACKENDS
print("devices:", [str(d) for d in ember.devices("all")])
for name in ("webgpu", "cuda"):
    print(name, "->", BACKENDS[name].unavailable_reason() or "available")
from ember._src.gpu import cuda_blas
print("cublas ->", cuda_blas.unavailable_reason() or cuda_blas._STATE["path"])
PY

timeout 330 python -m pytest -q -p no:cacheprovider -rs tests/gpu --junitxml "$OUT/junit.xml" \
    > "$OUT/tests.txt" 2>&1
echo "tests exit status: $?" >> "$OUT/tests.txt"

# the script skips what is left past --budget and rewrites gpu.{json,md} after every row
timeout 150 python benchmarks/bench_gpu.py --budget 135 --out "$OUT" > "$OUT/bench.txt" 2>&1
echo "bench exit status: $?" >> "$OUT/bench.txt"

echo "gpu_check: $(( $(date +%s) - start )) s; results in $OUT" | tee "$OUT/summary.txt"
tail -n 3 "$OUT/tests.txt" >> "$OUT/summary.txt"
