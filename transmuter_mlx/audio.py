"""The audio tasks as functions (``tm.audio.speech_to_text(...)``, ...); none is implemented yet.

>>> import transmuter_mlx as tm
>>> tm.audio.__all__
[]

An audio (or audio-and-text) task lands as a row of the task table
(``transmuter_mlx.pipelines.tasks.TASKS``, with ``function="audio.<name>"``) and a function here
written as those of ``tm.text`` (``def speech_to_text(model=None, /, **options)``, a docstring with
an example, ``pipeline(task, model, **options)``); tests/test_task_table.py checks that the table
and this module agree.
"""

from __future__ import annotations

__all__: list[str] = []
