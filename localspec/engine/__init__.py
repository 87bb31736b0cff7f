"""Serving requests on a loaded pair: the loader, placement, the scheduler and the engine thread."""

from localspec.engine.engine import Engine
from localspec.engine.request import Handle
from localspec.engine.types import Chunk, Progress, Response

__all__ = ["Chunk", "Engine", "Handle", "Progress", "Response"]
