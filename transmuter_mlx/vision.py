"""The vision tasks as functions (``tm.vision.image_classification(...)``, ...); none is implemented yet.

>>> import transmuter_mlx as tm
>>> tm.vision.__all__
[]

A vision (or image-and-text) task lands as a row of the task table
(``transmuter_mlx.pipelines.tasks.TASKS``, with ``function="vision.<name>"``) and a function here
written as those of ``tm.text`` (``def image_classification(model=None, /, **options)``, a docstring
with an example, ``pipeline(task, model, **options)``); tests/test_task_table.py checks that the
table and this module agree.
"""

from __future__ import annotations

__all__: list[str] = []
