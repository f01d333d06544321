"""wav2vec2 and the speech encoders exported like it (HuBERT, WavLM, UniSpeech, UniSpeech-SAT,
data2vec-audio, wav2vec2-conformer, SEW, SEW-D): raw audio in (``input_values``, an optional
``attention_mask``), per-frame CTC ``logits`` out.

>>> from transmuter_mlx import zoo
>>> wav2vec2 = zoo.family("hubert")
>>> wav2vec2.__name__, wav2vec2.SPEECH_RECOGNIZER
('transmuter_mlx.zoo.wav2vec2', 'ctc')
>>> args = wav2vec2.ModelArgs.from_dict({"model_type": "wav2vec2"})
>>> args.inputs_to_logits_ratio, args.min_samples
(320, 400)

A frame of logits covers ``inputs_to_logits_ratio`` samples (the product of the convolution strides,
as transformers' config computes it); ``min_samples`` is the shortest waveform the convolutions
turn into one frame (shorter audio is an error, not a crash in a convolution).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._base import HeadArgs

#: the ONNX file by role (``onnx/model.onnx`` and its variants)
FILES = {"model": ("model",)}
TASKS = frozenset({"automatic-speech-recognition", "audio-classification"})
DEFAULT_VARIANT = None
#: the recognizer of ``automatic-speech-recognition`` (pipelines/audio_speech.RECOGNIZERS): greedy CTC
SPEECH_RECOGNIZER = "ctc"


@dataclass
class ModelArgs(HeadArgs):
    """The feature encoder's convolutions (their defaults are those of ``Wav2Vec2Config``), and a
    classifier head's labels (``HeadArgs``)."""

    conv_stride: tuple[int, ...] | list[int] = (5, 2, 2, 2, 2, 2, 2)
    conv_kernel: tuple[int, ...] | list[int] = (10, 3, 3, 3, 3, 2, 2)

    @property
    def inputs_to_logits_ratio(self) -> int:
        """Samples per frame of logits: the product of the strides (``config.inputs_to_logits_ratio``)."""
        return math.prod(int(s) for s in self.conv_stride)

    @property
    def min_samples(self) -> int:
        """The fewest samples that give one frame (each unpadded convolution: ``(n - kernel) // stride + 1``)."""
        n = 1
        for kernel, stride in reversed(list(zip(self.conv_kernel, self.conv_stride, strict=True))):
            n = (n - 1) * int(stride) + int(kernel)
        return n
