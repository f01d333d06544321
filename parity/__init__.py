"""Parity runs: each pipeline against its reference (transformers, sentence-transformers, onnxruntime).

``python -m parity SUITE`` runs ``parity/SUITE.py``'s ``main`` (``python -m parity text``) and writes
``parity/reports/SUITE.md`` and ``SUITE.json``. tasks.py holds one spec per task (its reference and
how results are compared), runner.py runs a suite's cases with them, SUITE.py lists the cases.
"""
