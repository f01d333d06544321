"""OWL-ViT and OWLv2: open-vocabulary detectors that score each image patch's box against text queries.

>>> from transmuter_mlx import zoo
>>> owl = zoo.family("owlv2")
>>> args = owl.ModelArgs.from_dict({"model_type": "owlv2", "text_config": {}})
>>> owl.JOINT_QUERIES, owl.query_length(args), owl.box_extent(args, 480, 640)
(True, 16, (640, 640))

``model.onnx`` takes the text queries (``input_ids``, ``attention_mask``: the queries of all images of a
batch, image by image) and the images (``pixel_values``), and gives ``logits`` (a box's logit for each
query) and ``pred_boxes``. A query is scored alone, so all labels run as the queries of one run, and a
label's logits are those of a run of that label alone (transformers' zero-shot-object-detection
pipeline). The queries are padded to 16 tokens (``padding="max_length"`` of ``OwlViTProcessor``).
OWLv2 pads an image to a square before it resizes it, so its boxes are relative to that square.
OWLv2 maps here (``REMAP``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._base import BaseArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"zero-shot-object-detection"})
DEFAULT_VARIANT = None
#: all labels are the text queries of one run (else one run per label)
JOINT_QUERIES = True
#: model types whose processor pads the image to a square, the extent of their boxes
SQUARE_PADDED = ("owlv2",)


@dataclass
class ModelArgs(BaseArgs):
    """The config.json keys zero-shot detection reads: the text tower's positions (``text_config``)."""

    text_config: dict[str, Any] = field(default_factory=dict)


def query_length(args: ModelArgs) -> int:
    """The tokens of a text query, which every query is padded to: the text tower's positions (16)."""
    return int((args.text_config or {}).get("max_position_embeddings") or 16)


def max_query_tokens(args: ModelArgs) -> int:
    """The most tokens a label may have."""
    return query_length(args)


def query_text(label: str) -> str:
    """A label's text query: the label itself."""
    return label


def box_extent(args: ModelArgs, height: int, width: int) -> tuple[int, int]:
    """The ``(width, height)`` the relative boxes span: the image, or for OWLv2 the square it is padded to."""
    if args.model_type in SQUARE_PADDED:
        side = max(height, width)
        return side, side
    return width, height
