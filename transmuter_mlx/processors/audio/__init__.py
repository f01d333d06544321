"""Audio processors: a clip -> the features its model takes, as transformers' feature extractors make them.

>>> import numpy as np
>>> from transmuter_mlx.processors.audio import AudioProcessor
>>> whisper = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor"})
>>> whisper.preprocess(np.zeros(16000, np.float32), index=0)[0].feeds["input_features"].shape
(80, 3000)

- ``base.py``: :class:`AudioFeatures`, the :class:`AudioProcessor` protocol (``features``, ``preprocess``,
  ``bucket``, ``collate``, ``cut``), the dispatch on a config's ``feature_extractor_type``;
- ``whisper.py``: Whisper's log-mel (30 s windows and long-form); ``wav2vec2.py``: raw waveforms
  (wav2vec2, HuBERT, WavLM, Moonshine); ``ast.py``: AST's Kaldi filter banks; ``clap.py``: CLAP's
  decibel mel (fusion or one 10 s view); ``speecht5.py``: SpeechT5's waveform and log-mel targets;
- ``spectrogram.py``: windows, mel filter banks, the STFT and decibels of transformers' ``audio_utils``.
"""

from __future__ import annotations

from . import ast, clap, speecht5, wav2vec2, whisper  # noqa: F401 - registers the extractor types
from .base import REGISTRY, AudioFeatures, AudioProcessor

__all__ = ["REGISTRY", "AudioFeatures", "AudioProcessor"]
