"""XLA settings bmczoo needs before JAX starts its CPU backend.

XLA's CPU runtime (jaxlib 0.10) can stop forever on the first call of some of the Gibbs
sweep's programs when its *concurrency-optimised scheduler* orders them: every worker
thread waits for work while the caller waits for the result (no error, no CPU use).  It
happens, for example, with four chains of the Normal-Wishart prior with implicit-feedback
features on both sides and the learned noise, on problems of a few hundred rows and
columns.  XLA's other scheduler runs the same programs at the same speed
(``benchmarks/bench_compile.py`` gives the same seconds per sweep either way), so bmczoo
turns the concurrency-optimised one off.

The option is read once, when JAX starts its backend, from the environment variable
``XLA_FLAGS``: :func:`configure` (called when ``bmczoo`` is imported) appends it there
unless ``XLA_FLAGS`` already names it (a user's own choice is kept) or JAX's backend has
already started (it could not take effect then; importing bmczoo before the first JAX
computation avoids that).
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["SCHEDULER_FLAG", "configure"]

#: the XLA option bmczoo sets to ``false`` (see the module's docstring)
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"

_log = logging.getLogger("bmczoo")


def _backend_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    started = getattr(bridge, "backends_are_initialized", None)
    return bool(started and started())


def configure(environ=None) -> bool:
    """Append ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to ``XLA_FLAGS``.

    Parameters
    ----------
    environ : mutable mapping, optional
        The environment to change (default ``os.environ``).

    Returns
    -------
    bool
        True when the option was added; False when ``XLA_FLAGS`` already names it or JAX's
        backend has already started (then a debug message says so on the ``bmczoo``
        logger).
    """
    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "")
    if SCHEDULER_FLAG.lstrip("-") in flags:
        return False
    if _backend_started():
        _log.debug("JAX's backend started before bmczoo was imported: %s=false is not set "
                   "(put it in XLA_FLAGS, or import bmczoo first)", SCHEDULER_FLAG)
        return False
    environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}=false".strip()
    return True
