"""M2M100 and NLLB (``model_type`` m2m_100): BART-like encoder-decoders whose language is a special token.

>>> from transmuter_mlx.zoo import m2m_100
>>> m2m_100.language_ids("fr"), m2m_100.language_ids("fra_Latn")
(('fr', '__fr__'), ('fra_Latn', '__fra_Latn__'))

A language code is the token itself (NLLB's ``fra_Latn``) or, M2M100's spelling, ``__fr__`` for ``fr``.
"""

from __future__ import annotations

from .bart import DEFAULT_VARIANT, FILES, TASKS, ModelArgs  # noqa: F401 (the family's own, as BART's)


def language_ids(code: str) -> tuple[str, ...]:
    """The tokens a language code may be: itself, or M2M100's ``__code__``."""
    return (code, f"__{code}__")
