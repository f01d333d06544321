"""Model families, one module per family, found by the ``model_type`` of config.json.

>>> from transmuter_mlx import zoo
>>> zoo.family({"model_type": "distilbert"}).__name__
'transmuter_mlx.zoo.bert'

A family module exports ``ModelArgs`` (a dataclass of the config.json keys it reads, fields named as the
keys, derived values in ``__post_init__``; ``ModelArgs.from_dict(config)``), ``FILES`` (its ONNX files by
role, each a tuple of stems under ``onnx/`` tried in order: ``{"encoder": ("encoder_model",), ...}``),
``TASKS`` (the tasks it serves), ``DEFAULT_VARIANT`` and the steps of its tasks that differ (an encoder's
``feed_names``, an encoder-decoder's ``language_ids``). Model types that share a module are listed in
``REMAP``; a new family is one new module, or one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

if __name__ == "zoo":  # imported as a top-level module, from a checkout's root on sys.path
    raise ImportError(
        "`import zoo` would load a second copy of transmuter_mlx.zoo (the model families) that the package's own code never "
        "sees: import transmuter_mlx.zoo instead"
    )

__all__ = ["FEATURE_EXTRACTORS", "IMAGE_PROCESSORS", "REMAP", "TYPE_TASKS", "UnknownFamilyError", "describe_type",
           "families", "family", "feature_extractor", "image_processor", "type_config", "type_task"]

#: model_type -> module serving it (model types spelled with dashes need an entry too)
REMAP: dict[str, str] = {
    # encoders
    "distilbert": "bert",
    "electra": "bert",
    "albert": "bert",
    "deberta": "bert",
    "deberta-v2": "bert",
    "modernbert": "bert",
    "xlm-roberta": "roberta",
    "camembert": "roberta",
    "mpnet": "roberta",
    "longformer": "roberta",
    "data2vec-text": "roberta",
    "ibert": "roberta",
    # image encoders (one graph, pixel_values in)
    "deit": "vit",
    "beit": "vit",
    "swin": "vit",
    "swinv2": "vit",
    "convnext": "vit",
    "convnextv2": "vit",
    "mobilenet_v1": "vit",
    "mobilenet_v2": "vit",
    "mobilevit": "vit",
    "mobilevitv2": "vit",
    "dinov2": "vit",
    "dinov2_with_registers": "vit",
    "bit": "vit",
    "resnet": "vit",
    "efficientnet": "vit",
    "regnet": "vit",
    "levit": "vit",
    "pvt": "vit",
    "pvt_v2": "vit",
    "vit_msn": "vit",
    "vit_mae": "vit",
    "focalnet": "vit",
    "poolformer": "vit",
    "hiera": "vit",
    "dinat": "vit",
    "nat": "vit",
    # image-text towers
    "chinese_clip": "clip",
    # audio classifiers
    "audio-spectrogram-transformer": "ast",
    # detectors: DETR's softmax per query, RT-DETR's sigmoid per query and class; open-vocabulary ones
    "yolos": "detr",
    "rt_detr_v2": "rt_detr",
    "d_fine": "rt_detr",
    "rf_detr": "rt_detr",
    "owlv2": "owlvit",
    "grounding-dino": "grounding_dino",
    # dense image tasks: depth maps, background mattes (exports whose config.json is only a model_type)
    "depth_anything": "dpt",
    "modnet": "isnet",
    "SegformerForSemanticSegmentation": "isnet",  # briaai/RMBG-1.4's config.json says so (an IS-Net)
    # decoder-only LMs: rotary positions, or a table of learned ones (gpt2)
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "phi3": "llama",
    "gemma": "llama",
    "gemma2": "llama",
    "gemma3_text": "llama",
    "smollm3": "llama",
    "granite": "llama",
    "olmo": "llama",
    "olmo2": "llama",
    "stablelm": "llama",
    "starcoder2": "llama",
    "helium": "llama",
    "gpt_neox": "llama",
    "gptj": "llama",
    "codegen": "llama",
    "gpt_neo": "gpt2",
    "gpt_bigcode": "gpt2",
    "opt": "gpt2",
    # encoder-decoders
    "mt5": "t5",
    "umt5": "t5",
    "longt5": "t5",
    "mbart": "bart",
    "marian": "bart",
    "pegasus": "bart",
    "blenderbot": "bart",
    "blenderbot-small": "bart",
    # speech encoders with a CTC head (raw audio in, per-frame logits out)
    "hubert": "wav2vec2",
    "wavlm": "wav2vec2",
    "unispeech": "wav2vec2",
    "unispeech-sat": "wav2vec2",
    "data2vec-audio": "wav2vec2",
    "wav2vec2-conformer": "wav2vec2",
    "sew": "wav2vec2",
    "sew-d": "wav2vec2",
}


#: model_type -> the feature extractor transformers' AutoFeatureExtractor takes for it, when a
#: preprocessor_config.json names none (``feature_extractor(config)``)
FEATURE_EXTRACTORS: dict[str, str] = {
    "whisper": "WhisperFeatureExtractor",
    "audio-spectrogram-transformer": "ASTFeatureExtractor",
    "clap": "ClapFeatureExtractor",
    "speecht5": "SpeechT5FeatureExtractor",
    **dict.fromkeys(("wav2vec2", "hubert", "wavlm", "unispeech", "unispeech-sat", "data2vec-audio",
                     "wav2vec2-conformer", "sew", "sew-d", "moonshine"), "Wav2Vec2FeatureExtractor"),
}


#: model_type -> the image processor transformers' AutoImageProcessor takes for it, when a
#: preprocessor_config.json names none (``image_processor(config)``)
IMAGE_PROCESSORS: dict[str, str] = {
    "vit": "ViTImageProcessor",
    "swin": "ViTImageProcessor",
    "swinv2": "ViTImageProcessor",
    "clipseg": "ViTImageProcessor",
    "dinat": "ViTImageProcessor",
    "nat": "ViTImageProcessor",
    "ijepa": "ViTImageProcessor",
    "mgp-str": "ViTImageProcessor",
    "swiftformer": "ViTImageProcessor",
    "vit_mae": "ViTImageProcessor",
    "vit_msn": "ViTImageProcessor",
    "deit": "DeiTImageProcessor",
    "beit": "BeitImageProcessor",
    "data2vec-vision": "BeitImageProcessor",
    "segformer": "SegformerImageProcessor",
    "upernet": "SegformerImageProcessor",
    "siglip": "SiglipImageProcessor",
    "paligemma": "SiglipImageProcessor",
    "gemma3n": "SiglipImageProcessor",
    "owlvit": "OwlViTImageProcessor",
    "clip": "CLIPImageProcessor",
    "aimv2": "CLIPImageProcessor",
    "aimv2_vision_model": "CLIPImageProcessor",
    "git": "CLIPImageProcessor",
    "groupvit": "CLIPImageProcessor",
    "kosmos-2": "CLIPImageProcessor",
    "metaclip_2": "CLIPImageProcessor",
    "mlcd": "CLIPImageProcessor",
    "vipllava": "CLIPImageProcessor",
    "xclip": "CLIPImageProcessor",
    "bit": "BitImageProcessor",
    "dinov2": "BitImageProcessor",
    "focalnet": "BitImageProcessor",
    "hiera": "BitImageProcessor",
    "mobilenet_v1": "MobileNetV1ImageProcessor",
    "mobilenet_v2": "MobileNetV2ImageProcessor",
    "convnext": "ConvNextImageProcessor",
    "convnextv2": "ConvNextImageProcessor",
    "cvt": "ConvNextImageProcessor",
    "regnet": "ConvNextImageProcessor",
    "resnet": "ConvNextImageProcessor",
    "van": "ConvNextImageProcessor",
    "dpt": "DPTImageProcessor",
    "depth_anything": "DPTImageProcessor",
    "swin2sr": "Swin2SRImageProcessor",
    "detr": "DetrImageProcessor",
    "conditional_detr": "DetrImageProcessor",
    "deformable_detr": "DetrImageProcessor",
    "table-transformer": "DetrImageProcessor",
    "grounding-dino": "DetrImageProcessor",
    "mm-grounding-dino": "DetrImageProcessor",
    "yolos": "YolosImageProcessor",
    "rt_detr": "RTDetrImageProcessor",
    "owlv2": "Owlv2ImageProcessor",
    "mask2former": "Mask2FormerImageProcessor",
    "maskformer": "MaskFormerImageProcessor",
}


class UnknownFamilyError(ValueError):
    """A config.json whose model_type no zoo module serves."""


def family(config: Mapping[str, Any] | str) -> ModuleType:
    """The module of a config's family: ``family(repo.config)`` or ``family("roberta")``."""
    model_type = config if isinstance(config, str) else config.get("model_type")
    if not model_type:
        raise UnknownFamilyError("config.json has no model_type, so no model family can be chosen")
    name = REMAP.get(model_type, model_type).replace("-", "_")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise UnknownFamilyError(
            f"model_type {model_type!r} is not supported; supported families: {', '.join(families())}"
        ) from None


def image_processor(config: Mapping[str, Any]) -> str | None:
    """The image processor type of a config.json's model_type, when a preprocessor_config.json names none.

    >>> image_processor({"model_type": "dinov2"})
    'BitImageProcessor'
    """
    return IMAGE_PROCESSORS.get(config.get("model_type", ""))


def feature_extractor(config: Mapping[str, Any]) -> str | None:
    """The feature extractor type of a config.json's model_type, when a preprocessor_config.json names none.

    >>> feature_extractor({"model_type": "hubert"})
    'Wav2Vec2FeatureExtractor'
    """
    return FEATURE_EXTRACTORS.get(config.get("model_type", ""))


#: model_type -> the task its models are for, read when config.json lists no ``architectures``
#: (``tm.pipeline(model=...)`` without a task: transmuter_mlx/pipelines/task_inference.py)
TYPE_TASKS: dict[str, str] = {
    "gliner": "zero-shot-entity-recognition",
    "depth_anything": "depth-estimation",
    "marian": "translation",
    "clip": "zero-shot-image-classification",
    "siglip": "zero-shot-image-classification",
    "chinese_clip": "zero-shot-image-classification",
}


def type_task(config: Mapping[str, Any]) -> str | None:
    """The task of ``TYPE_TASKS`` for a config's model_type (None when it names none)."""
    return TYPE_TASKS.get(str(config.get("model_type", "")))


def type_config(model_type: str) -> dict[str, str]:
    """The smallest config.json of a family: ``{"model_type": model_type}``."""
    return {"model_type": model_type}


def describe_type(config: Mapping[str, Any]) -> str:
    """A config's model_type as an error message says it: ``"model_type 'bert'"`` or ``"no model_type"``."""
    return f"model_type {config['model_type']!r}" if config.get("model_type") else "no model_type"


def families() -> list[str]:
    """Every model_type served, the remapped ones included: ``"bert" in families()``."""
    import pkgutil

    modules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted(set(modules) | set(REMAP))
