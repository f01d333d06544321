"""Math ops (element-wise, activations, casts, reductions, linear algebra): no case is skipped."""

SKIPS: dict[str, dict[str, str]] = {"all": {}}
