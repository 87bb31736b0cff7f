"""The one exception type a person sees: its message says what is wrong and what to do."""


class LocalspecError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits non-zero."""


class PromptTooLong(LocalspecError):
    """The prompt plus max_tokens does not fit the context; carries both numbers for API errors."""

    def __init__(self, message: str, *, n_prompt: int, n_ctx: int) -> None:
        super().__init__(message)
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx


class GenerationFailed(LocalspecError):
    """The engine failed while a request ran (a decode llama.cpp refused, a bug): the server's
    fault, not the request's - a 500, where bad input found before anything is queued is a 400."""


class Busy(LocalspecError):
    """Good input that cannot be taken now (a shared resource is at its bound): retry shortly - the
    server's 503 with Retry-After, not a 400."""


class Cancelled(LocalspecError):
    """The work was given up part way (its client left): nobody is waiting for the answer."""


class Interrupted(LocalspecError):
    """A decode was stopped part way on purpose (every request in it had been cancelled): its entries
    are dropped as a failed decode's are, nothing failed, and a round that had a live request in it
    is run again."""
