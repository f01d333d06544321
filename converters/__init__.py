"""ONNX -> backend functions: load, plan, fold shape arithmetic, compile per shape signature."""

if __name__ == "converters":  # imported as a top-level module, from a checkout's root on sys.path
    raise ImportError(
        "`import converters` would load a second copy of transmuter_mlx.converters (its op registry and error types) that the package's own code never "
        "sees: import transmuter_mlx.converters instead"
    )
