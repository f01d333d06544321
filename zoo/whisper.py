"""Whisper: an encoder on 30 s of log-mel frames and a decoder of text and timestamp tokens.

>>> from transmuter_mlx.zoo import whisper
>>> args = whisper.ModelArgs.from_dict({"model_type": "whisper", "d_model": 384, "decoder_attention_heads": 6,
...                                     "max_target_positions": 448, "max_source_positions": 1500})
>>> args.num_attention_heads, args.head_dim, args.positions, whisper.SPEECH_RECOGNIZER
(6, 64, 448, 'whisper')

The decoder's positions are a learned table of ``max_target_positions`` rows; the encoder takes
``2 * max_source_positions`` log-mel frames (its two convolutions halve them), 30 s at 100 frames a second.
Speech recognition runs ``transmuter_mlx.generation.whisper_asr.WhisperRecognizer`` (``SPEECH_RECOGNIZER``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ._base import SEQ2SEQ_FILES, DecoderArgs

__all__ = ["DEFAULT_VARIANT", "FILES", "SPEECH_RECOGNIZER", "TASKS", "ModelArgs"]

FILES = SEQ2SEQ_FILES
TASKS = frozenset({"automatic-speech-recognition"})
DEFAULT_VARIANT = None
SPEECH_RECOGNIZER = "whisper"  # the key of pipelines.audio_speech.RECOGNIZERS


@dataclass
class ModelArgs(DecoderArgs):
    """The decoder's heads (``decoder_attention_heads``), head size (``d_model``) and positions
    (``max_target_positions``); the encoder's output positions (``max_source_positions``)."""

    POSITIONS: ClassVar[str] = "absolute"
    POSITIONS_KEY: ClassVar[str] = "max_target_positions"

    d_model: int | None = None
    decoder_attention_heads: int | None = None
    decoder_layers: int | None = None
    max_target_positions: int | None = None
    max_source_positions: int = 1500
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        self.hidden_size = self.hidden_size or self.d_model
        self.num_attention_heads = self.num_attention_heads or self.decoder_attention_heads
        self.max_position_embeddings = self.max_position_embeddings or self.max_target_positions
        super().__post_init__()
