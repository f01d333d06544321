#!/usr/bin/env bash
# GPU checks and benchmarks on a lent NVIDIA machine (the workplace's `device` tool); CI never needs it.
#
# The device image has Python 3.12, PyTorch with CUDA, onnxruntime (CPU), transformers and no mlx, and it
# reaches no package registry; one call carries at most 64 MiB. So the wheels travel from here, in parts:
#
#   benchmarks/gpu.sh fetch          # here: .whl/ (git-ignored) = mlx + mlx-cuda-13 in parts of < 60 MB, optimum
#   device run, carry [".whl/a"]:    benchmarks/gpu.sh stash          # the first part waits in .stash/ (ignored)
#   device run, carry [".whl/b"]:    benchmarks/gpu.sh run            # at once (a machine stays warm 30 s)
#
# `run` installs the wheels into /tmp/site, then, with PYTHONUNBUFFERED and everything under $OUT:
#   1. the backend and model tests on the GPU (mlx's default device is the GPU; torch's backend takes CUDA),
#   2. the encoder benchmark (MiniLM shape: ours on mlx-cuda and torch-CUDA, onnxruntime CPU, PyTorch eager
#      CUDA) -> $OUT/encoder-gpu.md, to be committed as benchmarks/results/encoder-gpu.md.
# Budget: about 6 minutes on an H200 (fixture build ~1 min, tests ~2, benchmark ~2); timeout_s 540.
set -euo pipefail
cd "$(dirname "$0")/.."
MLX_VERSION=$(python3 -c "import importlib.metadata as m; print(m.version('mlx'))" 2>/dev/null || echo 0.32.4)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"

case "${1:-run}" in
fetch)
    rm -rf .whl && mkdir -p .whl/a .whl/b
    platforms=(--platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
               --platform manylinux2014_x86_64)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl/tmp "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" optimum optimum-onnx
    cuda=$(basename .whl/tmp/mlx_cuda_13-*.whl)
    split -b 60M ".whl/tmp/$cuda" .whl/part-
    mv .whl/part-aa .whl/a/ && mv .whl/part-ab .whl/b/
    echo "$cuda" > .whl/b/NAME
    mv .whl/tmp/mlx-*.whl .whl/tmp/optimum*.whl .whl/b/ && rm -rf .whl/tmp
    du -sh .whl/a .whl/b
    ;;
stash)
    mkdir -p .stash && cp .whl/a/part-* .stash/ && ls -la .stash
    ;;
run)
    name=$(cat .whl/b/NAME)
    cat .stash/part-aa .whl/b/part-ab > "/tmp/$name"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "/tmp/$name" .whl/b/*.whl
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
    python3 -c "import mlx.core as mx, torch; print('mlx', mx.__version__, mx.default_device(), '| torch',
        torch.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/machine.txt"
    set +e
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_backends.py tests/test_tensor_primitives.py \
        tests/test_nn_primitives.py tests/test_fusion.py tests/test_models.py 2>&1 | tail -40 > "$OUT/tests.log"
    timeout 240 python3 benchmarks/encoder.py --shapes 1x16,8x128,32x128 --runs 5 \
        --output "$OUT/encoder-gpu.md" 2>&1 | tail -30
    ;;
*)
    echo "usage: benchmarks/gpu.sh fetch|stash|run" >&2
    exit 2
    ;;
esac
