"""Quantization ops (QuantizeLinear, DequantizeLinear, integer matmul/conv): every case passes."""

SKIPS: dict[str, dict[str, str]] = {"all": {}}
