"""The one exception type a person sees: its message says what is wrong and what to do."""


class LocalspecError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits non-zero."""
