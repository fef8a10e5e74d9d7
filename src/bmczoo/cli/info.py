"""``bmczoo info``: versions, JAX's devices, the hot path and the compiled kernel."""

from __future__ import annotations


def cmd_info(args) -> int:
    """Print :func:`bmczoo.show_config`'s report; exit code 0."""
    from .._config import show_config

    show_config()
    return 0
