"""One served model, whatever the dialect: the internal request (request.py), the event stream out
of the engine (events.py, made in answer.py, carried to the event loop by stream.py), and the
facade routes use (facade.py; local.py over an in-process Engine). No HTTP here: server/ speaks the
dialects over it."""

from localspec.serving.errors import APIError
from localspec.serving.events import Delta, Event, Finished, Progress, TokenLogprob, Usage, total_usage
from localspec.serving.facade import Embedded, Model, ModelCard, Prompt, Stream
from localspec.serving.request import Message, Request, Tool, ToolCall

__all__ = [
    "APIError", "Delta", "Embedded", "Event", "Finished", "Message", "Model", "ModelCard", "Progress", "Prompt", "Request",
    "Stream", "TokenLogprob", "Tool", "ToolCall", "Usage", "total_usage",
]  # fmt: skip
