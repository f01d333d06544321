"""ONNX -> backend functions: load, plan, fold shape arithmetic, compile per shape signature."""
