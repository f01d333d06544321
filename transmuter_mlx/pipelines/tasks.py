"""The task table: one frozen row per task, and the aliases beside it.

>>> TASKS["fill-mask"].function
'text.fill_mask'
>>> ALIASES["ner"], ALIASES["fill_mask"]
('token-classification', 'fill-mask')

As transformers.js's ``SUPPORTED_TASKS``: a row names the pipeline class, the modality, the kind of
processor, the default repository, the ``tm.<module>.<name>`` function and the command line's
handling of the task. ``tm.pipeline``, the ``tm.text`` / ``tm.vision`` / ``tm.audio`` functions, the
CLI (``python -m transmuter_mlx``, ``list``) and the parity runners (``parity/tasks.py``) read it, and
tests check that they agree with it: a new task is a row here, its function, and its parity spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .audio_classification import AudioClassification
from .audio_speech import SpeechToText
from .audio_tts import TextToSpeech
from .audio_zero_shot import ZeroShotAudioClassification
from .base import Pipeline
from .command_line import (
    AUDIO,
    GENERATED_TEXTS,
    IMAGES,
    LABELLED_AUDIO,
    LABELLED_IMAGES,
    LABELLED_TEXTS,
    PAIRED_TEXTS,
    QUERIES,
    QUESTIONS,
    SPEECH,
    TEXTS,
    CommandLine,
)
from .text import (
    FillMask,
    QuestionAnswering,
    TextClassification,
    TextEmbedding,
    TextRanking,
    TokenClassification,
    ZeroShotClassification,
    ZeroShotEntityRecognition,
)
from .text_generation import TextGeneration
from .text_to_text import Summarization, TextToText, Translation
from .vision_classification import ImageClassification, ImageEmbedding
from .vision_dense import BackgroundRemoval, DepthEstimation, ImageSegmentation, ImageToImage
from .vision_detection import ObjectDetection, ZeroShotObjectDetection
from .vision_zero_shot import ZeroShotImageClassification

__all__ = ["ALIASES", "TASKS", "Modality", "Task"]

#: transformers.js's ``type`` of a task
Modality = Literal["text", "image", "audio", "multimodal"]


@dataclass(frozen=True)
class Task:
    """A row of the task table.

    ``processor`` is what turns an input into feeds (``"tokenizer"``, ``"image"``, ``"audio"``);
    ``function`` the dotted name under ``tm`` (``"text.fill_mask"`` is ``tm.text.fill_mask``: a
    multimodal task names the module it belongs to); ``command_line`` how the CLI reads its inputs.
    """

    cls: type[Pipeline]
    modality: Modality
    default_model: str
    processor: str = "tokenizer"
    function: str = ""
    command_line: CommandLine = TEXTS

    @property
    def module(self) -> str:
        """The module of ``tm`` that holds the task's function: ``"text"``."""
        return self.function.partition(".")[0]

    @property
    def function_name(self) -> str:
        """The task function's own name: ``"fill_mask"``."""
        return self.function.rpartition(".")[2]


TASKS: MappingProxyType[str, Task] = MappingProxyType(
    {
        "text-embedding": Task(
            TextEmbedding, "text", "Xenova/all-MiniLM-L6-v2", function="text.text_embedding"
        ),
        "text-classification": Task(
            TextClassification,
            "text",
            "Xenova/distilbert-base-uncased-finetuned-sst-2-english",
            function="text.text_classification",
            command_line=PAIRED_TEXTS,
        ),
        "text-ranking": Task(
            TextRanking,
            "text",
            "Xenova/ms-marco-MiniLM-L-6-v2",
            function="text.text_ranking",
            command_line=QUERIES,
        ),
        "zero-shot-classification": Task(
            ZeroShotClassification,
            "text",
            "Xenova/distilbert-base-uncased-mnli",
            function="text.zero_shot_classification",
            command_line=LABELLED_TEXTS,
        ),
        "zero-shot-entity-recognition": Task(
            ZeroShotEntityRecognition,
            "text",
            "onnx-community/gliner_small-v2.1",
            function="text.zero_shot_entity_recognition",
            command_line=LABELLED_TEXTS,
        ),
        "token-classification": Task(
            TokenClassification, "text", "Xenova/bert-base-NER", function="text.token_classification"
        ),
        "fill-mask": Task(FillMask, "text", "Xenova/bert-base-uncased", function="text.fill_mask"),
        "question-answering": Task(
            QuestionAnswering,
            "text",
            "Xenova/distilbert-base-cased-distilled-squad",
            function="text.question_answering",
            command_line=QUESTIONS,
        ),
        "text-generation": Task(
            TextGeneration,
            "text",
            "onnx-community/Qwen3-0.6B-ONNX",
            function="text.generation",
            command_line=GENERATED_TEXTS,
        ),
        "text2text-generation": Task(
            TextToText,
            "text",
            "Xenova/flan-t5-small",
            function="text.text_to_text",
            command_line=GENERATED_TEXTS,
        ),
        "translation": Task(
            Translation, "text", "Xenova/t5-small", function="text.translation", command_line=GENERATED_TEXTS
        ),
        "summarization": Task(
            Summarization,
            "text",
            "Xenova/distilbart-cnn-6-6",
            function="text.summarization",
            command_line=GENERATED_TEXTS,
        ),
        "image-classification": Task(
            ImageClassification,
            "image",
            "Xenova/vit-base-patch16-224",
            processor="image",
            function="vision.image_classification",
            command_line=IMAGES,
        ),
        "image-embedding": Task(
            ImageEmbedding,
            "image",
            "Xenova/clip-vit-base-patch32",
            processor="image",
            function="vision.image_embedding",
            command_line=IMAGES,
        ),
        "zero-shot-image-classification": Task(
            ZeroShotImageClassification,
            "multimodal",
            "Xenova/clip-vit-base-patch32",
            processor="image",
            function="vision.zero_shot_image_classification",
            command_line=LABELLED_IMAGES,
        ),
        "depth-estimation": Task(
            DepthEstimation,
            "image",
            "onnx-community/depth-anything-v2-small",
            processor="image",
            function="vision.depth_estimation",
            command_line=IMAGES,
        ),
        "image-segmentation": Task(
            ImageSegmentation,
            "image",
            "Xenova/segformer-b0-finetuned-ade-512-512",
            processor="image",
            function="vision.image_segmentation",
            command_line=IMAGES,
        ),
        "background-removal": Task(
            BackgroundRemoval,
            "image",
            "onnx-community/ormbg-ONNX",
            processor="image",
            function="vision.background_removal",
            command_line=IMAGES,
        ),
        "image-to-image": Task(
            ImageToImage,
            "image",
            "Xenova/swin2SR-classical-sr-x2-64",
            processor="image",
            function="vision.image_to_image",
            command_line=IMAGES,
        ),
        "object-detection": Task(
            ObjectDetection,
            "image",
            "Xenova/detr-resnet-50",
            processor="image",
            function="vision.object_detection",
            command_line=IMAGES,
        ),
        "zero-shot-object-detection": Task(
            ZeroShotObjectDetection,
            "image",
            "Xenova/owlvit-base-patch32",
            processor="image",
            function="vision.zero_shot_object_detection",
            command_line=LABELLED_IMAGES,
        ),
        "automatic-speech-recognition": Task(
            SpeechToText,
            "audio",
            "Xenova/whisper-tiny.en",
            processor="audio",
            function="audio.speech_to_text",
            command_line=SPEECH,
        ),
        "audio-classification": Task(
            AudioClassification,
            "audio",
            "Xenova/wav2vec2-base-superb-ks",
            processor="audio",
            function="audio.audio_classification",
            command_line=AUDIO,
        ),
        "zero-shot-audio-classification": Task(
            ZeroShotAudioClassification,
            "multimodal",
            "Xenova/clap-htsat-unfused",
            processor="audio",
            function="audio.zero_shot_audio_classification",
            command_line=LABELLED_AUDIO,
        ),
        "text-to-speech": Task(
            TextToSpeech, "text", "Xenova/mms-tts-eng", function="audio.text_to_speech"
        ),
    }
)

#: other names of the tasks: those of transformers (and transformers.js), then the task functions' names
ALIASES: MappingProxyType[str, str] = MappingProxyType(
    {
        "feature-extraction": "text-embedding",
        "sentence-similarity": "text-embedding",
        "embeddings": "text-embedding",
        "sentiment-analysis": "text-classification",
        "reranking": "text-ranking",
        "ner": "token-classification",
        "gliner": "zero-shot-entity-recognition",
        "image-feature-extraction": "image-embedding",
        "text-to-audio": "text-to-speech",
        **{row.function_name: name for name, row in TASKS.items() if row.function_name not in (name, "")},
    }
)
