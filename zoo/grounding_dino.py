"""Grounding DINO: an open-vocabulary detector that reads a text and an image together.

>>> from transmuter_mlx import zoo
>>> gd = zoo.family("grounding-dino")
>>> gd.JOINT_QUERIES, gd.query_text("A Remote Control")
(False, 'a remote control.')

``model.onnx`` takes ``pixel_values`` and ``pixel_mask`` (from the image processor) with the token ids of
one text (``input_ids``, ``attention_mask``, ``token_type_ids``) and gives ``logits`` (each box against
each token, -inf past the text) and ``pred_boxes``. The exports compute the phrases of a text for one
phrase and a period, so each label runs alone: its text is the label in lowercase and a period, as
``GroundingDinoProcessor`` makes it for a list of labels, and a label cannot hold ``"."`` or ``"?"``, which
end a phrase. A box's score is the sigmoid of its highest logit (the post-processing of transformers'
zero-shot-object-detection pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import BaseArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"zero-shot-object-detection"})
DEFAULT_VARIANT = None
#: all labels as the queries of one run (no: one run per label and image)
JOINT_QUERIES = False
#: characters that end a phrase of the text
PHRASE_ENDS = (".", "?")


@dataclass
class ModelArgs(BaseArgs):
    """The config.json keys zero-shot detection reads: the longest text (``max_text_len``)."""

    max_text_len: int = 256


def query_length(args: ModelArgs) -> None:
    """Texts are not padded (each runs alone)."""
    return None


def max_query_tokens(args: ModelArgs) -> int:
    """The most tokens a label's text may have: ``max_text_len``."""
    return args.max_text_len


def query_text(label: str) -> str:
    """A label's text: lowercase, stripped, ending in a period; a ValueError for a label with a phrase end."""
    ends = [c for c in PHRASE_ENDS if c in label]
    if ends:
        raise ValueError(f"the label {label!r} holds {ends[0]!r}, which ends a phrase of Grounding DINO's text; "
                         "give each object as a label of its own")
    return label.strip().lower() + "."


def box_extent(args: ModelArgs, height: int, width: int) -> tuple[int, int]:
    """The ``(width, height)`` the model's relative boxes span: the image's."""
    return width, height
