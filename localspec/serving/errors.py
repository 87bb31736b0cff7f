"""A request's failure in no dialect's shape: the HTTP status, one line a person can act on, the
request field it is about, a machine-readable code and headers. Each dialect writes it in its own
shape (OpenAI's `{"error": {...}}`, Anthropic's, Ollama's); the facade and the routes only raise it."""

from __future__ import annotations

from localspec.errors import Busy, GenerationFailed, LocalspecError, PromptTooLong


def kind_of(status: int) -> str:
    """The error's kind from its status, in OpenAI's words (other dialects map these to theirs)."""
    if status >= 500:
        return "server_error"
    return "not_found_error" if status == 404 else "invalid_request_error"


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or kind_of(status)
        self.headers = headers or {}


def from_localspec(e: LocalspecError, prompt_param: str | None = None) -> APIError:
    """Bad input the engine refused (it raises before anything is queued): a 400; a generation that
    failed inside the engine afterwards is the server's fault: a 500."""
    if isinstance(e, GenerationFailed):
        return APIError(500, str(e), code="generation_failed")
    if isinstance(e, PromptTooLong):
        return APIError(400, str(e), param=prompt_param, code="context_length_exceeded")
    if isinstance(e, Busy):  # good input that cannot be taken now (a resource at its bound)
        return APIError(503, str(e), code="server_busy", headers={"Retry-After": "1"})
    return APIError(400, str(e))


def as_api_error(e: BaseException) -> APIError:
    """Whatever ended a request, as the error its client is told."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, LocalspecError):
        return from_localspec(e)
    return APIError(500, str(e))
