"""Conformance cases of the nn group (convolution, pooling, normalisation, resize, sampling) we skip."""

SKIPS: dict[str, dict[str, str]] = {
    "all": {
        "test_maxunpool_export_with_output_shape": (
            "the reference scatters into the inferred shape and zero-pads to output_shape; we index "
            "output_shape directly, as onnxruntime and torch's max_unpool do (onnxruntime fails it too)"
        ),
    },
}
