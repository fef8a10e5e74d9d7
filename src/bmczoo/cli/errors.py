"""The command line's errors: :class:`CLIError` and the one line printed for any error."""

from __future__ import annotations


class CLIError(Exception):
    """An error reported as one line, without a traceback, ending with the pointer to the
    subcommand's help (:func:`see_help`).

    Parameters
    ----------
    message : str
        The error, in the command line's terms (its options, not ``bmc.fit``'s names).
    command : str, optional
        The subcommand the error is about (``""``: the top level), where the raiser knows
        it better than the caller of :func:`error_line` (argparse's usage errors).
    """

    def __init__(self, message: str, *, command: str | None = None):
        super().__init__(message)
        self.command = command


def see_help(command: str | None) -> str:
    """The pointer that ends every error line about the command line's arguments: one
    form for all of them, naming the subcommand's help (the top level's for ``""`` or
    None)."""
    return f"(see 'bmczoo {command} --help')" if command else "(see 'bmczoo --help')"


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


def error_line(e: BaseException, command: str | None = None) -> str:
    """The one line printed for an error: the message of an expected error, the first line
    of an unexpected one with its type.  A :class:`CLIError` (an error in the arguments of
    ``command``, the subcommand, unless the error names its own) ends with
    :func:`see_help`; with neither, no pointer (the caller passes no ``command`` for an
    error met after the work, e.g. while writing the outputs: not about the arguments)."""
    if is_network_error(e):
        reason = " ".join(str(getattr(e, "reason", None) or e).split())
        return (
            f"a download failed ({reason}); without network access give local files "
            "(fit: --data PATH; reproduce movielens: --data-dir FOLDER)"
        )
    text = str(e)
    if isinstance(e, FloatingPointError):  # the library's hint, in command-line terms
        text = text.replace("dtype=jnp.float64", "--dtype float64")
    if isinstance(e, CLIError):
        line = " ".join(text.split()) or type(e).__name__
        target = command if e.command is None else e.command
        return line if target is None else f"{line} {see_help(target)}"
    if isinstance(e, (ValueError, OSError, FloatingPointError)):
        return " ".join(text.split()) or type(e).__name__
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (
        f"{type(e).__name__}: {first} (rerun with --debug for the traceback)"
        if first
        else f"{type(e).__name__} (rerun with --debug for the traceback)"
    )
