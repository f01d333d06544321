"""The audio processor protocol: one clip -> :class:`AudioFeatures`; a batch of them -> the model's feeds.

>>> import numpy as np
>>> processor = AudioProcessor.from_config({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})
>>> features = processor.preprocess(np.ones(8000, np.float32), index=0)[0]
>>> features.feeds["input_values"].shape, features.num_samples, processor.sampling_rate
((8000,), 8000, 16000)
>>> processor.collate([features, features], processor.bucket(features))["input_values"].shape
(2, 8000)

A processor reads ``preprocessor_config.json`` with the keys and defaults of the transformers 4.57.6
feature extractor it names (``feature_extractor_type``) and gives, for one clip (a float32 mono waveform at
``sampling_rate``, as :func:`transmuter_mlx.audio_input.load_audio` loads it), the feeds that feature
extractor gives for that clip alone, without the batch axis (``features``). Clips batch together when
their feeds have one shape (``bucket``): always for the fixed-size extractors (``fixed_size``: Whisper's
30 s, AST's 1024 frames, CLAP's 10 s), for raw waveforms only when they have one length (padding a
waveform changes what a model without an attention mask computes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..config import ConfigReader, prefix, registrar

if TYPE_CHECKING:
    from ...hub import Repo

__all__ = ["REGISTRY", "AudioFeatures", "AudioProcessor"]

Bucket = tuple[int, ...]

#: transformers' feature extractor class name -> our class (filled by ``register``)
REGISTRY: dict[str, type[AudioProcessor]] = {}


@dataclass
class AudioFeatures:
    """One clip (or one piece of a long clip), ready for the model."""

    feeds: dict[str, np.ndarray]  # the model's feeds of this clip, without the batch axis
    num_samples: int  # the samples of the clip these features hold (before padding or truncation)
    owner: int = 0  # the input index
    offset: int = 0  # the first sample of the piece in its input (0 for a whole clip)


register = registrar(REGISTRY)


class AudioProcessor(ConfigReader):
    """A feature extractor of one transformers type: ``features`` of a clip, ``collate`` a batch.

    Subclasses read their keys in ``__init__`` and implement :meth:`features`; ``feed_names`` lists what
    ``features`` gives (the first one decides the bucket).
    """

    kind = "audio"
    names: ClassVar[tuple[str, ...]] = ()
    SAMPLING_RATE: ClassVar[int] = 16000
    fixed_size: ClassVar[bool] = False  # whether every clip gives feeds of one shape (then clips batch)

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        self.config = dict(config)
        self.task = task
        self.sampling_rate = int(self.value("sampling_rate", self.SAMPLING_RATE))
        if self.sampling_rate <= 0:
            raise self.error(f"sampling_rate must be positive, got {self.sampling_rate}")
        self.padding_value = float(self.value("padding_value", 0.0))
        self.return_attention_mask = bool(self.config.get("return_attention_mask", False))
        self.feed_names: tuple[str, ...] = ("input_values",)

    # ------------------------------------------------------------------ config
    @classmethod
    def from_config(cls, config: Mapping[str, Any], task: str = "") -> AudioProcessor:
        """The processor a preprocessor_config.json names (``AudioProcessor.from_config(json.load(f))``);
        a subclass builds itself."""
        if cls is not AudioProcessor:
            return cls(config, task)
        name = config.get("feature_extractor_type")
        if not name:
            raise ValueError(f"{prefix(task)}the preprocessor config names no feature_extractor_type; "
                             f"supported: {', '.join(sorted(REGISTRY))}")
        if name not in REGISTRY:
            raise ValueError(f"{prefix(task)}feature extractor {name!r} is not supported; supported: "
                             f"{', '.join(sorted(REGISTRY))}")
        return REGISTRY[name](config, task)

    @classmethod
    def from_repo(cls, repo: Repo, task: str = "") -> AudioProcessor:
        """The processor of a repository's preprocessor_config.json: ``AudioProcessor.from_repo(open_repo(id))``."""
        from ...hub import RepoFileNotFoundError

        config = repo.read_json("preprocessor_config.json")
        if config is None:
            raise RepoFileNotFoundError(f"{prefix(task)}{repo.name} has no preprocessor_config.json, which "
                                        "an audio task needs (the feature extractor's settings)")
        if not config.get("feature_extractor_type") and repo.exists("config.json"):  # as AutoFeatureExtractor
            from ... import zoo

            name = zoo.feature_extractor(repo.config)
            config = {**config, "feature_extractor_type": name} if name else config
        return cls.from_config(config, task)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.names[0] if self.names else ''}, {self.sampling_rate} Hz)"

    # ------------------------------------------------------------------ one clip
    def features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """The feeds of one clip (float32 mono at ``sampling_rate``), without the batch axis: what the
        transformers feature extractor gives for ``[waveform]``, its batch axis dropped."""
        raise NotImplementedError

    def preprocess(self, item: Any, index: int) -> list[AudioFeatures]:
        """The features of input ``index`` (anything :func:`~transmuter_mlx.audio_input.load_audio` takes;
        a float32 1-D array is taken as it is, at ``sampling_rate``)."""
        from ...audio_input import load_audio

        wave = load_audio(item, self.sampling_rate, self.task, index)
        if not isinstance(wave, np.ndarray):
            raise TypeError(f"{prefix(self.task, index)}a stream of audio blocks has no features of its own; "
                            "read its blocks with audio_input.iter_audio_blocks")
        try:
            feeds = self.features(wave)
        except ValueError as error:
            raise ValueError(f"{prefix(self.task, index)}{error}") from error
        return [AudioFeatures(feeds, int(wave.shape[0]), index)]

    # ------------------------------------------------------------------ a batch
    def bucket(self, features: AudioFeatures) -> Bucket:
        return tuple(features.feeds[self.feed_names[0]].shape)

    def collate(self, batch: Sequence[AudioFeatures], bucket: Bucket) -> dict[str, np.ndarray]:
        """Each feed stacked along a new batch axis (clips of one bucket only)."""
        first = self.feed_names[0]
        shapes = {f.feeds[first].shape for f in batch}
        if shapes != {tuple(bucket)}:
            raise ValueError(f"clips of feature shapes {sorted(shapes)} cannot share the batch of shape {bucket}")
        return {name: np.stack([f.feeds[name] for f in batch]) for name in batch[0].feeds}

    def cut(self, value: np.ndarray, features: AudioFeatures, bucket: Bucket) -> np.ndarray:
        return value
