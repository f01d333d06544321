"""Moonshine: a speech encoder-decoder that reads raw audio (``input_values`` and ``attention_mask``) and
decodes text with a rotary-position decoder.

>>> from transmuter_mlx.zoo import moonshine
>>> args = moonshine.ModelArgs.from_dict({"model_type": "moonshine", "hidden_size": 288,
...                                       "decoder_num_attention_heads": 8, "max_position_embeddings": 194})
>>> args.num_attention_heads, args.num_key_value_heads, args.head_dim, args.POSITIONS, args.min_samples
(8, 8, 36, 'rotary', 895)

Its files are those of a seq2seq export (``encoder_model`` and ``decoder_model_merged``);
``automatic-speech-recognition`` runs it with :class:`~transmuter_mlx.pipelines.audio_moonshine.MoonshineRecognizer`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import SEQ2SEQ_FILES, DecoderArgs

FILES = SEQ2SEQ_FILES
TASKS = frozenset({"automatic-speech-recognition"})
DEFAULT_VARIANT = None
#: the recognizer of ``automatic-speech-recognition`` (pipelines/audio_speech.RECOGNIZERS)
SPEECH_RECOGNIZER = "moonshine"


@dataclass
class ModelArgs(DecoderArgs):
    """The decoder's heads come from ``decoder_num_attention_heads`` / ``decoder_num_key_value_heads``."""

    decoder_num_attention_heads: int | None = None
    decoder_num_key_value_heads: int | None = None

    def __post_init__(self) -> None:
        self.num_attention_heads = self.num_attention_heads or self.decoder_num_attention_heads
        self.num_key_value_heads = self.num_key_value_heads or self.decoder_num_key_value_heads
        super().__post_init__()

    @property
    def min_samples(self) -> int:
        """The fewest samples the encoder's convolution stem (kernels 127, 7, 3; strides 64, 3, 2) turns
        into one frame."""
        n = 1
        for kernel, stride in ((3, 2), (7, 3), (127, 64)):
            n = (n - 1) * stride + kernel
        return n
