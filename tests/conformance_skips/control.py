"""Control flow, sequence, string, random, detection and training ops."""

_RANDOM = "random draws: the expected values come from numpy's global generator and cannot be reproduced"

SKIPS: dict[str, dict[str, str]] = {
    "all": {
        "test_bernoulli": _RANDOM,
        "test_bernoulli_double": _RANDOM,
        "test_bernoulli_double_expanded": _RANDOM,
        "test_bernoulli_expanded": _RANDOM,
        "test_bernoulli_seed": _RANDOM,
        "test_bernoulli_seed_expanded": _RANDOM,
    },
}
