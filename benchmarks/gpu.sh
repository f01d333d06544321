#!/usr/bin/env bash
# GPU checks and benchmarks on a lent NVIDIA machine (the workplace's `device` tool); CI never needs it.
#
# The device image has Python 3.12, PyTorch with CUDA, transformers 5, onnxruntime (CPU) and no mlx, and it
# reaches no package registry; one call carries at most 64 MiB. So mlx travels from here as wheels, mlx-cuda-13
# (90 MB) in two parts, and the benchmark's BERT is exported there by torch.onnx (optimum-onnx does not support
# transformers 5):
#
#   benchmarks/gpu.sh fetch                          # here: .whl/a and .whl/b (git-ignored)
#   device run, carry [".whl/a"]:  benchmarks/gpu.sh torch   # mlx (CPU) + part 1 stashed; torch-CUDA tests
#   device run, carry [".whl/b"]:  benchmarks/gpu.sh mlx     # at once (a machine stays warm 30 s): mlx-cuda
#   (`stash` instead of `torch` stashes part 1 alone; GPU_BENCH=0 skips the benchmark, GPU_TESTS_S=240 gives the
#   tests more time)
#
# `torch`: our torch backend on CUDA (the ONNX node suite and the backend/primitive tests, mlx on the CPU
#   beside it) -> $OUT/tests-torch-cuda.log; the MiniLM-shaped BERT built into .cache/ for the second call.
# `mlx`: the encoder benchmark (ours on mlx-cuda and torch-CUDA, onnxruntime CPU, PyTorch eager CUDA)
#   -> $OUT/encoder-gpu.md (commit it as benchmarks/results/encoder-gpu.md), then the same tests on mlx's GPU
#   -> $OUT/tests-mlx-cuda.log. About 3 + 6 minutes of device time; timeout_s 300 and 420.
set -euo pipefail
cd "$(dirname "$0")/.."
MLX_VERSION=$(python3 -c "import importlib.metadata as m; print(m.version('mlx'))" 2>/dev/null || echo 0.32.4)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
TESTS=(tests/test_conformance.py tests/test_backends.py tests/test_tensor_primitives.py tests/test_nn_primitives.py)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

machine() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/machine.txt"
    python3 -c "import mlx.core as mx, torch, transmuter_mlx; print('mlx', mx.__version__, mx.default_device(),
        '| torch', torch.__version__, torch.cuda.get_device_name())" 2>&1 | tee -a "$OUT/machine.txt"
}

case "${1:-}" in
fetch)
    rm -rf .whl && mkdir -p .whl/a .whl/b .whl/tmp
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        -d .whl/tmp "mlx==$MLX_VERSION" "mlx-cpu==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION"
    cuda=$(basename .whl/tmp/mlx_cuda_13-*.whl)
    split -b 45M ".whl/tmp/$cuda" .whl/part-
    mv .whl/part-aa .whl/a/ && mv .whl/part-ab .whl/b/ && echo "$cuda" > .whl/b/NAME
    cp .whl/tmp/mlx-*.whl .whl/b/ && mv .whl/tmp/mlx-*.whl .whl/tmp/mlx_cpu-*.whl .whl/a/ && rm -rf .whl/tmp
    du -sh .whl/a .whl/b
    ;;
stash)  # part 1 only (a fresh machine for a second `mlx`)
    mkdir -p .stash && cp .whl/a/part-aa .stash/
    ;;
torch)
    mkdir -p .stash && cp .whl/a/part-aa .stash/
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-cpu .whl/a/*.whl
    export PYTHONPATH=/tmp/site-cpu:$PWD
    machine
    set +e
    timeout 60 python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import encoder; print(encoder._fixture('minilm'))" \
        2>&1 | tail -3
    timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE -k torch "${TESTS[@]}" > "$OUT/tests-torch-cuda.log" 2>&1
    tail -15 "$OUT/tests-torch-cuda.log"
    ;;
mlx)
    name=$(cat .whl/b/NAME)
    cat .stash/part-aa .whl/b/part-ab > "/tmp/$name"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-cuda "/tmp/$name" .whl/b/mlx-*.whl
    export PYTHONPATH=/tmp/site-cuda:$PWD
    machine
    set +e
    if [ "${GPU_BENCH:-1}" = 1 ]; then
        timeout 200 python3 benchmarks/encoder.py --shapes 1x16,8x128,32x128 --runs 5 --rounds 1 --budget 20 \
            --output "$OUT/encoder-gpu.md" 2>&1 | tail -30
    fi
    # mlx-cuda compiles each case's kernels on first use (~0.8 s a case): 16 workers where pytest-xdist is
    parallel=(); python3 -c "import xdist" 2>/dev/null && parallel=(-n 16)
    timeout "${GPU_TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE "${parallel[@]}" -k mlx "${TESTS[@]}" \
        > "$OUT/tests-mlx-cuda.log" 2>&1
    tail -15 "$OUT/tests-mlx-cuda.log"
    ;;
*)
    echo "usage: benchmarks/gpu.sh fetch|stash|torch|mlx" >&2
    exit 2
    ;;
esac
