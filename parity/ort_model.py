"""An onnxruntime session shaped like ``tm.Model``: the reference of the quantized variants.

>>> from parity.ort_model import OrtModel
>>> model = OrtModel("bert-mlm/onnx/model_quantized.onnx")          # doctest: +SKIP
>>> [i.name for i in model.inputs]                                  # doctest: +SKIP
['input_ids', 'attention_mask', 'token_type_ids']

Given as ``model=`` to a pipeline, it runs our pipeline logic on onnxruntime's outputs of the same
ONNX file, so that a q8/q4 run is compared with the same file rather than with the fp32 weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .exact_int8 import reference_source


class OrtModel:
    """An onnxruntime session with ``inputs``, ``outputs``, ``backend`` and a call on a dict of feeds."""

    def __init__(self, path: str | Path, threads: int = 1, exact: bool = True) -> None:
        """``threads``: onnxruntime's intra-op threads; 1 by default, for results that don't depend on the
        machine (a q8 LSTM's do, docs/text.md); 0 is onnxruntime's own choice, what a speed comparison wants.
        ``exact``: int8 weights as uint8 where this CPU's int8 kernels saturate (parity/exact_int8.py); False runs
        the file as it is (a speed comparison)."""
        import onnxruntime as ort

        from transmuter_mlx.converters.backends import HOST
        from transmuter_mlx.converters.model import TensorInfo

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        source = reference_source(path) if exact else str(path)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        dtypes = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
                  "tensor(bool)": np.bool_}
        self.inputs = [
            TensorInfo(i.name, np.dtype(dtypes.get(i.type, np.int64)), tuple(i.shape))
            for i in self.session.get_inputs()
        ]
        self.outputs = [TensorInfo(o.name, None, None) for o in self.session.get_outputs()]
        self.backend = HOST

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.outputs]
        return dict(zip(names, self.session.run(None, dict(feeds))))
