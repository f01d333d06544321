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

__all__ = ["REMAP", "UnknownFamilyError", "families", "family"]

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


def families() -> list[str]:
    """Every model_type served, the remapped ones included: ``"bert" in families()``."""
    import pkgutil

    modules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted(set(modules) | set(REMAP))
