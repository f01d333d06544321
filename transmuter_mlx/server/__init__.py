"""An OpenAI-compatible HTTP server for the pipelines: ``python -m transmuter_mlx serve TASK=MODEL ...``.

>>> from transmuter_mlx.server import ServerSettings
>>> ServerSettings().max_queue
256

:func:`create_app` builds the ASGI app (Starlette) over a :class:`ModelRegistry` (each model a pipeline
behind its own ``tm.Serving``); :func:`serve` runs it under uvicorn. See docs/serving.md.
"""

from .app import ServerSettings, create_app
from .models import ModelRegistry, ServedModel, parse_model_specs
from .run import serve

__all__ = ["ModelRegistry", "ServedModel", "ServerSettings", "create_app", "parse_model_specs", "serve"]
