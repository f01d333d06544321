"""Parity of the text pipelines with transformers and sentence-transformers, on the text fixtures.

>>> from parity.text import CASES, run_case                    # doctest: +SKIP
>>> run_case(CASES[0], "mlx", "fp32").passed                  # doctest: +SKIP
True

``python -m parity text`` runs every case on both backends and the fp32/q8/q4 variants and
writes parity/reports/text.md and text.json. The cases are this module's; how each task is run
and compared is its row of parity/tasks.py (the reference, the normal form of a result), and
parity/runner.py runs them: fp32 against the reference within ``TOLERANCE["fp32"]``, q8 and q4
against our pipeline logic on onnxruntime's outputs of the same file within ``TOLERANCE[variant]``.
"""

from __future__ import annotations

from . import runner
from .runner import BACKENDS, FILES, TOLERANCE, Case, Outcome

__all__ = ["BACKENDS", "CASES", "FILES", "QA", "TEXTS", "TOLERANCE", "Case", "Outcome", "main", "run_case"]

TITLE = "Text pipelines: parity"
INTRO = (
    "fp32 is compared with transformers 4.57.6 pipelines "
    "(sentence-transformers `encode` / `CrossEncoder.rank` for embeddings and ranking, the gliner package's "
    "`predict_entities` for zero-shot entities) on the fixture's "
    "PyTorch weights, within 1e-4 on every score (embeddings: every element) and identical labels, "
    "tokens and spans (byte offsets). q8 and q4 are compared with the same pipeline logic on "
    "onnxruntime's outputs of the same ONNX file (on one thread), within 1e-3. A swap of two items whose reference "
    "scores are within the tolerance counts as agreement."
)

TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait in Zürich, 東京 too!",
    "",
]
LONG = " ".join(["Paris is the capital of France and the Eiffel Tower is in Paris."] * 12)
QA = [
    {"question": "Where is the tower?", "context": "The Eiffel Tower is in Paris, the capital of France."},
    {"question": "What is in Zürich?", "context": "Café au lait in Zürich, and 東京 has sushi."},
    {"question": "What is the capital?", "context": LONG},  # windows of 128 tokens, stride 64
]

GLINER_LABELS = ("city", "person", "organization")
GLINER_TEXTS = [
    "Paris is the capital of France and Alice works at Google in London.",
    "Zoë flew from Zürich to São Paulo with Ørsted's CEO.",
    {"text": "Alice met Bob in Paris; they work for Google.", "labels": ["person", "company"]},
]

CASES: list[Case] = [
    *(
        Case("text-embedding", f, tuple(TEXTS))
        for f in ("bert-embed-cls", "bert-embed-mean", "bert-embed-onnx", "minilm")
    ),
    *(
        Case("text-classification", f, tuple(TEXTS), {"top_k": None})
        for f in (
            "bert-sst3",
            "bert-score",
            "bert-regress",
            "bert-multilabel",
            "distilbert-sst2",
            "xlmr-sst3",
        )
    ),
    Case(
        "text-classification",
        "roberta-pair",
        (("A man eats.", "Someone is eating."), ("Hi", "Bye")),
        {"top_k": None},
    ),
    Case(
        "text-ranking", "bert-rerank", ({"query": "Where is Paris?", "documents": TEXTS[:3] + [LONG[:200]]},)
    ),
    Case(
        "zero-shot-classification", "bert-nli", tuple(TEXTS[:3]), {"labels": ["travel", "cooking", "dance"]}
    ),
    Case(
        "zero-shot-classification",
        "bert-nli",
        tuple(TEXTS[:3]),
        {"labels": ["travel", "cooking", "dance"], "multi_label": True},
        "multi_label",
    ),
    *(
        Case("token-classification", "bert-ner", tuple(TEXTS[:3]), {"aggregation_strategy": s}, s)
        for s in ("none", "simple", "first", "average", "max")
    ),
    *(
        Case("zero-shot-entity-recognition", f, tuple(GLINER_TEXTS), {"labels": list(GLINER_LABELS), **o}, name,
             ("fp32", "q8"))
        for f in ("gliner-span", "gliner-token")
        for name, o in (("default", {}), ("nested", {"threshold": 0.3, "flat_ner": False}),
                        ("multi_label", {"threshold": 0.3, "multi_label": True}))
    ),
    Case("fill-mask", "bert-mlm", ("Paris is the [MASK] of France.", "Café [MASK] lait in Zürich.")),
    Case("question-answering", "bert-qa", tuple(QA), {"top_k": 3}),
]


def run_case(case: Case, backend: str, variant: str) -> Outcome:
    """One case on one backend and variant, on its text fixture (built offline when not cached)."""
    if case.fixture.startswith("gliner"):
        from tests.fixtures.gliner_models import build
    else:
        from tests.fixtures.text_models import build

    return runner.check(case, build(case.fixture), backend, variant)


def main(argv: list[str] | None = None) -> int:
    """``python -m parity text [--backend mlx] [--variant fp32] [--task fill-mask]``"""
    return runner.main(argv, "text", CASES, run_case, TITLE, INTRO)
