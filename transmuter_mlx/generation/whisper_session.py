"""``WhisperSession``: an ``EncoderDecoderSession`` that also keeps the cross attentions of Whisper's
alignment heads, call by call once ``collect(heads)`` is set (word timestamps are read from them; the
recognizer collects them in one teacher-forced pass over a finished row, see ``whisper_decode``).

The decoder export must have ``cross_attentions.N`` outputs (one per decoder layer, (rows, heads,
new positions, encoder positions)); only the ``alignment_heads`` ``(layer, head)`` of generation_config.json
are kept, on the host, as float32: ``attentions()`` gives (rows, alignment heads, positions, encoder
positions) for every decoder position so far, the prompt included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .seq2seq import EncoderDecoderSession

__all__ = ["WhisperSession"]


class WhisperSession(EncoderDecoderSession):
    """The encoder-decoder session, collecting the alignment heads' cross attentions when ``heads`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.alignment_heads: tuple[tuple[int, int], ...] = ()  # set before prefill to collect
        self._collected: list[np.ndarray] = []

    @property
    def has_cross_attentions(self) -> bool:
        """Whether the decoder graph returns ``cross_attentions.N``."""
        return any(o.name.startswith("cross_attentions.") for o in self.decoder.outputs)

    def collect(self, heads: Sequence[tuple[int, int]]) -> None:
        """Keep the cross attentions of ``heads`` from the next ``prefill`` on (empty: keep none)."""
        self.alignment_heads = tuple(heads)
        self._collected = []

    def attentions(self) -> np.ndarray:
        """(rows, heads, positions, encoder positions) of the collected steps."""
        return np.concatenate(self._collected, axis=2)

    def _keep(self, out: dict[str, Any]) -> None:
        if not self.alignment_heads:
            return
        per_head = []
        for layer, head in self.alignment_heads:
            name = f"cross_attentions.{layer}"
            if name not in out:
                raise ValueError(
                    f"{self.decoder.name}: word timestamps need the decoder's cross attentions, and this export "
                    f"has no {name} output; export it with cross attentions (see docs/audio.md)")
            a = out[name]
            a = self.B.to_numpy(a) if self.B.is_array(a) else np.asarray(a)
            per_head.append(a[:, head].astype(np.float32))
        self._collected.append(np.stack(per_head, axis=1))

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        self._collected = []
        return super().prefill(prompts)

    def reorder(self, rows: np.ndarray) -> None:
        super().reorder(rows)
        index = np.asarray(rows, np.int64).reshape(-1)
        self._collected = [a[index] for a in self._collected]

    def _decoded(self, model: Any, out: dict[str, Any]) -> None:
        if model is self.decoder:  # a split layout's decoder with past has no cross attentions to keep
            self._keep(out)
