"""The audio pipeline base: a clip in, its features through one encoder graph, a result per clip.

>>> from transmuter_mlx.pipelines.audio import AudioPipeline
>>> AudioPipeline.single_types[:2], AudioPipeline.per_position
((<class 'numpy.ndarray'>, <class 'dict'>), False)

``preprocess`` loads an input as :func:`~transmuter_mlx.audio_input.load_audio` does (an array at the
model's rate, a ``{"raw"/"array", "sampling_rate"}`` dict, a path, a URL or encoded bytes; float32 mono at
the feature extractor's ``sampling_rate``) and turns it into :class:`AudioFeatures` with the repository's
feature extractor (``preprocessor_config.json``, or the ``featurizer=`` option); ``forward`` runs the
features in batches of ``compile.batch_size`` when the extractor gives every clip one shape (``fixed_size``:
Whisper, AST, CLAP), and one clip per call otherwise (raw waveforms; the graph then compiles once per
length); each feed is cast to the dtype the graph declares. ``postprocess`` is the task's own. The loaded
waveform is kept as ``Prepared.data``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..audio_input import AUDIO_TYPES, load_audio
from ..processors import Processor
from ..processors.audio import AudioFeatures, AudioProcessor
from .base import EncoderPipeline, Prepared

__all__ = ["AudioFeatures", "AudioPipeline"]


class AudioPipeline(EncoderPipeline):
    """A task on one audio graph (the family's ``FILES["model"]``) and the repository's feature extractor."""

    per_position = False
    single_types = AUDIO_TYPES

    def build_processor(self) -> Processor:
        """The feature extractor of ``preprocessor_config.json`` (or the ``featurizer=`` option)."""
        featurizer = self.options.featurizer
        return featurizer if featurizer is not None else AudioProcessor.from_repo(self.repo, self.task)

    @property
    def sampling_rate(self) -> int:
        """The rate the model takes audio at (the feature extractor's)."""
        return int(self.processor.sampling_rate)

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        wave = load_audio(item, self.sampling_rate, self.task, index)
        if not isinstance(wave, np.ndarray):
            raise TypeError(f"{self.task}: input {index}: a stream of audio blocks is not an input of this task; "
                            "give the whole clip")
        return Prepared(self.processor.preprocess(wave, index), data=wave)

    @property
    def batch_size(self) -> int:
        """Clips per call: ``compile.batch_size`` when every clip gives one feature shape, else 1."""
        return self.options.compile.batch_size if getattr(self.processor, "fixed_size", False) else 1

    def run_model(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model on one batch; each feed cast to the dtype the graph declares (fp16 files take fp16)."""
        return super().run_model(self.declared_feeds(feeds, "the feature extractor"))
