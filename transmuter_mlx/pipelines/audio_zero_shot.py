"""zero_shot_audio_classification: a clip scored against labels you give, by an audio-text model (CLAP)."""

from __future__ import annotations

from types import MappingProxyType

from .audio import AudioPipeline
from .zero_shot_media import LabelScoring

__all__ = ["ZeroShotAudioClassification"]


class ZeroShotAudioClassification(LabelScoring, AudioPipeline):
    """Scores of the labels you give for a clip, best first: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> classify = ZeroShotAudioClassification(build("clap"), labels=["a dog barking", "rain"])
    >>> tone = np.sin(np.arange(48000) * 2 * np.pi * 440 / 48000).astype(np.float32)  # 1 s at 48 kHz
    >>> predictions = classify(tone)["predictions"]
    >>> sorted(p["label"] for p in predictions), round(sum(p["score"] for p in predictions), 4)
    (['a dog barking', 'rain'], 1.0)

    As transformers' zero-shot-audio-classification pipeline: each label goes into
    ``hypothesis_template`` (default "This is a sound of {}."), the texts (padded to the longest)
    and the clips run through ``model.onnx`` together, and the scores are a softmax of
    ``logits_per_audio`` over the labels; every label is in the result. ``labels`` (or
    ``candidate_labels``) at build or at each call. CLAP takes 48 kHz samples
    (``{"array": samples, "sampling_rate": n}`` is resampled) and a fixed window (10 s for the
    released models): ``ClapFeatureExtractor`` repeats a shorter clip and pads it, so clips run
    ``compile.batch_size`` per call. A longer clip is cut to its first window, where transformers
    takes a window at a random position (``truncation="rand_trunc"``), so results for clips longer
    than the window differ from transformers' (which differ from call to call).
    """

    task = "zero-shot-audio-classification"
    per_position = False
    defaults = MappingProxyType({"labels": None, "candidate_labels": None,
                                 "hypothesis_template": "This is a sound of {}."})
    logits = "logits_per_audio"
