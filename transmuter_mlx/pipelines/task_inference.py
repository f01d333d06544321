"""The task of a repository, for ``tm.pipeline(model=...)`` without a task (as transformers' ``pipeline``).

>>> infer_task("Xenova/bert-base-NER")                      # BertForTokenClassification
'token-classification'
>>> infer_task("Xenova/distilbert-base-uncased-mnli")       # a sequence classifier with an "entailment" label
'zero-shot-classification'
>>> infer_task("onnx-community/gliner_small-v2.1")          # the gliner family serves one task
'zero-shot-entity-recognition'

transformers asks the Hub for the repository's ``pipeline_tag``; offline, the task is read from the files.
The candidates are the tasks that the zoo family of config.json serves (``zoo.family``; a type that no family
serves raises the zoo's UnknownFamilyError, as ``tm.pipeline`` does with a task), and the first of these rules
that names a candidate decides:

1. the family serves one task (GLiNER, Whisper, CLAP, VITS, RT-DETR, Swin2SR, ...);
2. the model card's ``pipeline_tag`` (README.md's front matter, where the Hub's tag comes from; aliases such
   as ``feature-extraction`` resolved). ``transformers.js_config`` of config.json names no task (its keys are
   ``dtype``, ``device``, ``device_config``, ``kv_cache_dtype``, ``free_dimension_overrides``,
   ``use_external_data_format``), so it is not read;
3. config.json's ``architectures``, by the class name's suffix (``ARCHITECTURES``); a sequence classifier is
   ``zero-shot-classification`` when a label starts with "entail" (an NLI head), ``text-ranking`` when it has
   one label and says it is a cross-encoder (a ``sentence_transformers`` key in config.json, or "ms-marco",
   "rerank", "cross-encoder" in its name), else ``text-classification`` (a one-label head is as often a
   score or a regression, which transformers' text-classification gives); ``*ForConditionalGeneration`` of an
   encoder-decoder (T5, BART, M2M100, NLLB) is text2text-generation, Marian's ``MarianMTModel`` translation
   (an NLLB or BART-CNN model card says translation or summarization, and rule 2 reads it);
4. the family type when config.json has no ``architectures`` (``zoo.TYPE_TASKS``);
5. the files: sentence-transformers' (``modules.json``, ``1_Pooling/``) -> text-embedding, an encoder and a
   decoder ONNX file -> text2text-generation, a decoder alone -> text-generation.

When none decides, a :class:`TaskInferenceError` (a ValueError) names the repository, what was read and the
candidate tasks:

>>> import json, pathlib
>>> folder = pathlib.Path("fancy")
>>> folder.mkdir()
>>> config = {"architectures": ["BertForFancy"]}
>>> _ = (folder / "config.json").write_text(json.dumps({**config, **zoo.type_config("bert")}))
>>> infer_task(folder)
Traceback (most recent call last):
...
transmuter_mlx.pipelines.task_inference.TaskInferenceError: cannot infer the task of folder 'fancy' \
(architectures ['BertForFancy'], ...): ... candidate tasks: text-embedding, text-classification, ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import zoo
from ..hub import HubError, Repo, open_repo, read_model_card
from .tasks import ALIASES, TASKS

__all__ = ["ARCHITECTURES", "TaskInferenceError", "infer_task"]

_ANY_MODEL = (
    "text-embedding",
    "zero-shot-image-classification",
    "zero-shot-audio-classification",
    "image-embedding",
    "text-to-speech",
)

#: suffix of an architecture's class name -> its tasks, preferred first (the first the family serves wins);
#: the first suffix that matches is used, so longer suffixes come before the ones they end with
ARCHITECTURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ForSequenceClassification", ("text-classification", "audio-classification")),
    ("ForTokenClassification", ("token-classification",)),
    ("ForQuestionAnswering", ("question-answering",)),
    ("ForMaskedLM", ("fill-mask",)),
    ("ForCausalLM", ("text-generation",)),
    ("LMHeadModel", ("text-generation",)),
    ("MTModel", ("translation",)),  # MarianMTModel
    ("ForConditionalGeneration", ("text2text-generation", "automatic-speech-recognition")),
    ("ForSpeechSeq2Seq", ("automatic-speech-recognition",)),
    ("ForCTC", ("automatic-speech-recognition",)),
    ("ForAudioClassification", ("audio-classification",)),
    ("ForImageClassification", ("image-classification",)),
    ("ForImageClassificationWithTeacher", ("image-classification",)),
    ("ForObjectDetection", ("object-detection", "zero-shot-object-detection")),
    ("ForDepthEstimation", ("depth-estimation",)),
    ("ForSemanticSegmentation", ("image-segmentation", "background-removal")),
    ("ForUniversalSegmentation", ("image-segmentation",)),
    ("ForInstanceSegmentation", ("image-segmentation",)),
    ("ForSegmentation", ("image-segmentation",)),  # DetrForSegmentation
    ("ForImageSuperResolution", ("image-to-image",)),
    ("ForTextToSpeech", ("text-to-speech",)),
    ("VisionModelWithProjection", ("image-embedding",)),
    ("TextModelWithProjection", ("text-embedding",)),
    ("VisionModel", ("image-embedding",)),
    ("TextModel", ("text-embedding",)),
    ("Model", _ANY_MODEL),  # a bare encoder (BertModel, ViTModel), or the two towers of CLIPModel / ClapModel
)

#: files that sentence-transformers saves with a model (it embeds texts)
SENTENCE_FILES = ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json",
                  "config_sentence_transformers.json")
#: names of cross-encoders (rerankers) whose config.json does not say so
_RANKER_NAME = re.compile(r"ms[-_]?marco|rerank|cross[-_]encoder", re.IGNORECASE)


class TaskInferenceError(ValueError):
    """No rule of :func:`infer_task` decides the task of a repository; ``candidates`` are the tasks left."""

    def __init__(self, message: str, candidates: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.candidates = candidates


def infer_task(
    model: str | Path | tuple[str, str] | Repo,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    offline: bool | None = None,
) -> str:
    """The task table's name of the task of ``model`` (a repo id, a folder, a ``Repo``), by the rules of the
    module docstring; a TaskInferenceError listing the candidate tasks when none decides.

    >>> infer_task("Xenova/bert-base-uncased"), infer_task("Xenova/vit-base-patch16-224")
    ('fill-mask', 'image-classification')
    """
    repo = open_repo(model, revision=revision, cache_dir=cache_dir, offline=offline)
    config = repo.config
    served = zoo.family(config).TASKS  # an UnknownFamilyError (a ValueError) when no family serves it, any task
    candidates = tuple(t for t in TASKS if t in served)
    architectures = config.get("architectures") or []
    architectures = [architectures] if isinstance(architectures, str) else list(architectures)

    task = _decide(repo, config, candidates, architectures)
    if task is not None:
        return task
    read = [f"architectures {architectures}" if architectures else "no architectures", zoo.describe_type(config)]
    raise TaskInferenceError(
        f"cannot infer the task of {repo.name} ({', '.join(read)}): neither its model card, config.json nor "
        f"its files decide it; pass the task, tm.pipeline(task, model), one of the candidate "
        f"tasks: {', '.join(candidates)}",
        candidates,
    )


def _decide(repo: Repo, config: Mapping[str, Any], candidates: tuple[str, ...],
            architectures: list[str]) -> str | None:
    if len(candidates) == 1:
        return candidates[0]
    tag = _card_tag(repo)
    if tag in candidates:
        return tag
    for architecture in architectures:
        task = _architecture_task(str(architecture), repo, config, candidates)
        if task is not None:
            return task
    if not architectures and zoo.type_task(config) in candidates:
        return zoo.type_task(config)
    return _files_task(repo, candidates)


def _card_tag(repo: Repo) -> str | None:
    """The model card's pipeline_tag as a task table name (None without one, or when it cannot be read)."""
    try:
        tag = read_model_card(repo).get("pipeline_tag")
    except (HubError, OSError):
        return None
    return ALIASES.get(tag, tag) if isinstance(tag, str) else None


def _architecture_task(architecture: str, repo: Repo, config: Mapping[str, Any],
                       candidates: tuple[str, ...]) -> str | None:
    for suffix, tasks in ARCHITECTURES:
        if architecture.endswith(suffix):
            for task in tasks:
                if task == "text-classification":
                    task = _sequence_task(repo, config, candidates)
                if task in candidates:
                    return task
            return None
    return None


def _sequence_task(repo: Repo, config: Mapping[str, Any], candidates: tuple[str, ...]) -> str:
    """A text sequence classifier's task: NLI head -> zero-shot, one-label cross-encoder -> ranking."""
    id2label = config.get("id2label") or {}
    labels = [str(k) for k in (config.get("label2id") or {})] or [str(v) for v in id2label.values()]
    if "zero-shot-classification" in candidates and any(x.lower().startswith("entail") for x in labels):
        return "zero-shot-classification"
    count = len(id2label) or config.get("num_labels") or 2
    names = f"{repo.source} {config.get('_name_or_path', '')}"
    if count == 1 and ("sentence_transformers" in config or _RANKER_NAME.search(names)):
        return "text-ranking"
    return "text-classification"


def _files_task(repo: Repo, candidates: tuple[str, ...]) -> str | None:
    try:
        files = set(repo.list_files())
    except (HubError, OSError):
        return None
    stems = {Path(f).name.partition(".")[0] for f in files if f.startswith("onnx/") and f.endswith(".onnx")}
    if "text-embedding" in candidates and files.intersection(SENTENCE_FILES):
        return "text-embedding"
    has_encoder = any(s.startswith("encoder_model") for s in stems)
    has_decoder = any(s.startswith("decoder_model") for s in stems)
    if has_encoder and has_decoder and "text2text-generation" in candidates:
        return "text2text-generation"
    if has_decoder and not has_encoder and "text-generation" in candidates:
        return "text-generation"
    return None
