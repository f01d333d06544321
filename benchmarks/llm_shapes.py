"""Decoder LLMs of real shapes with random weights, for the generation benchmark (``--shape``).

Each is a ``tests/fixtures/generation_models.py`` spec in the onnxruntime-genai layout: the PyTorch
checkpoint, optimum's fp32 export of it (``<family>-<hash>/onnx/model.onnx``) and the genai builder's fp32 and
int4 exports (``<name>-<hash>/onnx/model.onnx``, ``model_q4.onnx``), built offline once into ``.cache/fixtures``
(minutes, and gigabytes for the larger ones); not part of the test run.

>>> sorted(SHAPES)
['qwen3-0.6b', 'smollm2-135m']
"""

from __future__ import annotations

from tests.fixtures.generation_models import GenSpec

SHAPES = {
    # HuggingFaceTB/SmolLM2-135M's config.json: 30 layers of 576, 9 heads (3 KV), MLP 1536, vocabulary 49152
    "smollm2-135m": GenSpec("smollm2-135m-genai", "llama", layout="genai", hidden_size=576, num_hidden_layers=30,
                            num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                            max_position_embeddings=2048, initializer_range=0.02),
    # Qwen/Qwen3-0.6B: 28 layers of 1024, 16 heads (8 KV) of 128, MLP 3072, vocabulary 151936
    "qwen3-0.6b": GenSpec("qwen3-0.6b-genai", "qwen3", layout="genai", hidden_size=1024, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, intermediate_size=3072, vocab_size=151936,
                          max_position_embeddings=2048, initializer_range=0.02),
}
