"""The command line's errors: :class:`CLIError` and the one line printed for any error."""

from __future__ import annotations


class CLIError(Exception):
    """An error reported as one line, without a traceback."""


# the exceptions of a failed download (urllib's URLError and HTTPError are OSErrors)
def is_network_error(e: BaseException) -> bool:
    """Whether ``e`` is the failure of a download (no network, a refused connection...)."""
    import http.client
    import socket
    import urllib.error

    return isinstance(
        e,
        (
            urllib.error.URLError,
            http.client.HTTPException,
            socket.gaierror,
            socket.timeout,
            ConnectionError,
            TimeoutError,
        ),
    )


def error_line(e: BaseException) -> str:
    """The one line printed for an error: the message of an expected error, the first line
    of an unexpected one with its type."""
    if is_network_error(e):
        reason = " ".join(str(getattr(e, "reason", None) or e).split())
        return (
            f"a download failed ({reason}); without network access give local files "
            "(fit: --data PATH; reproduce movielens: --data-dir FOLDER)"
        )
    text = str(e)
    if isinstance(e, FloatingPointError):  # the library's hint, in command-line terms
        text = text.replace("dtype=jnp.float64", "--dtype float64")
    if isinstance(e, (CLIError, ValueError, OSError, FloatingPointError)):
        return " ".join(text.split()) or type(e).__name__
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (
        f"{type(e).__name__}: {first} (rerun with --debug for the traceback)"
        if first
        else f"{type(e).__name__} (rerun with --debug for the traceback)"
    )
