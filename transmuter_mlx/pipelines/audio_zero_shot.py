"""zero_shot_audio_classification: a clip scored against labels you give, by an audio-text model (CLAP)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..tokenizer import Tokenizer
from ..zoo._base import score
from .audio import AudioPipeline
from .base import Prepared
from .batching import run_batched
from .vision_zero_shot import candidate_labels

__all__ = ["ZeroShotAudioClassification"]


class ZeroShotAudioClassification(AudioPipeline):
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

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.tokenizer = self.options.tokenizer or Tokenizer.from_repo(self.repo)
        self.text_names = [i.name for i in self.model.inputs if i.name in ("input_ids", "attention_mask")]

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The labels' texts, tokenized once per call (as zero-shot image classification does)."""
        labels = candidate_labels(self.task, options)
        template = options["hypothesis_template"]
        if not isinstance(template, str) or template.format("\0") == template:
            raise ValueError(f"{self.task}: hypothesis_template {template!r} has no {{}} for the label")
        texts = [self.family.label_text(template.format(label)) for label in labels]
        encoded = self.tokenizer(texts, truncation=True, **self.family.text_padding())
        return {**options, "labels": labels, "text_feeds": encoded.feeds(self.text_names)}

    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[dict[str, np.ndarray]]]:
        text = options["text_feeds"]

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # only the outputs with a clip axis
            return {"logits_per_audio": self.output(self.run_model({**feeds, **text}), "logits_per_audio")}

        rows = [row for p in prepared for row in p.rows]
        return [[o] for o in run_batched(rows, self.processor, run, self.batch_size, False)]

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        labels = options["labels"]
        scores = score(self.output(outputs[0], "logits_per_audio").reshape(-1), self.family.ZERO_SHOT_SCORES)
        order = sorted(range(len(labels)), key=lambda j: -scores[j])
        return {"predictions": [{"label": labels[j], "score": float(scores[j])} for j in order]}
