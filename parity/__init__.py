"""Parity runs: each pipeline against its reference (transformers, sentence-transformers, onnxruntime).

``python -m parity NAME`` runs ``parity/NAME.py``'s ``main`` (``python -m parity text``) and writes
``parity/reports/NAME.md`` and ``NAME.json``.
"""
