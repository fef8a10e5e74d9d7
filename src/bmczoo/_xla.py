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

jaxlib 0.10.0-0.10.2 has a second way to stop forever on the CPU: its batched LAPACK
kernels (Cholesky, triangular solves, ...) split a large batch over XLA's intra-op thread
pool and wait for the pieces *on a worker of that same pool*; when as many such calls run
at once as the pool has workers, every worker waits and nothing runs (on a 2-core machine,
four independent batched Cholesky factorisations in one program suffice).  jaxlib 0.11
runs these kernels on the calling thread.  For the affected versions
:func:`configure_pool` gives the pool more workers than the program is likely to have such
calls at once, through ``PJRT_NPROC`` (the pool's size; a user's own value is kept): two
more workers than CPUs, at least four, so that the two factors' independent batched calls
cannot take every worker.  It stays that small because XLA splits its parallel
operations over every worker: a pool several times the CPUs slows the sweeps on a small
machine.

:func:`compile` compiles bmczoo's own programs (the Gibbs sweeps and their start, the VB
iteration) on the CPU at LLVM's first optimisation level instead of XLA's default third:
most of their compilation is the code generation of a few hundred small fused kernels,
which takes a fifth to a third less time at that level, while the time of a sweep goes
to the sparse products and LAPACK's factorisations, which are library code and run at
the same speed within a few percent (``benchmarks/bench_compile.py`` measures the first,
``benchmarks/bench_gibbs.py`` the second). The draws are the same up to rounding.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = [
    "CPU_COMPILER_OPTIONS",
    "POOL_VARIABLE",
    "SCHEDULER_FLAG",
    "compile",
    "compiler_options",
    "configure",
    "configure_pool",
    "pool_size",
]

#: the XLA option bmczoo sets to ``false`` (see the module's docstring)
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"

#: the environment variable that sets the size of XLA's CPU thread pool
POOL_VARIABLE = "PJRT_NPROC"

#: the XLA options of :func:`compile` on the CPU (see the module's docstring)
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}

#: jaxlib versions whose batched LAPACK kernels wait on the pool they run on
_POOL_BUG = ((0, 10, 0), (0, 10, 2))

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
        _log.debug(
            "JAX's backend started before bmczoo was imported: %s=false is not set "
            "(put it in XLA_FLAGS, or import bmczoo first)",
            SCHEDULER_FLAG,
        )
        return False
    environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}=false".strip()
    return True


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _jaxlib_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def pool_size(cpu_count: int | None) -> int:
    """The pool size :func:`configure_pool` sets: two workers more than the CPUs, at least
    four."""
    return max(4, (cpu_count or 1) + 2)


def configure_pool(
    environ=None, jaxlib_version: str | None = None, cpu_count: int | None = None
) -> bool:
    """Set ``PJRT_NPROC`` (the size of XLA's CPU thread pool) for jaxlib 0.10.0-0.10.2.

    Parameters
    ----------
    environ : mutable mapping, optional
        The environment to change (default ``os.environ``).
    jaxlib_version : str, optional
        The installed jaxlib's version (default: read from its metadata).
    cpu_count : int, optional
        The CPUs this process may use (default: its CPU affinity).

    Returns
    -------
    bool
        True when the variable was set; False for other jaxlib versions, when the variable
        is already set (a user's own choice is kept) or when JAX's backend has already
        started (then a debug message says so on the ``bmczoo`` logger).
    """
    environ = os.environ if environ is None else environ
    version = _jaxlib_version() if jaxlib_version is None else jaxlib_version
    if version is None or not (_POOL_BUG[0] <= _version(version) <= _POOL_BUG[1]):
        return False
    if environ.get(POOL_VARIABLE):
        return False
    if _backend_started():
        _log.debug(
            "JAX's backend started before bmczoo was imported: %s is not set (jaxlib %s can stop "
            "forever on concurrent batched LAPACK calls; import bmczoo first)",
            POOL_VARIABLE,
            version,
        )
        return False
    if cpu_count is None:
        cpu_count = (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        )
    environ[POOL_VARIABLE] = str(pool_size(cpu_count))
    return True


def compiler_options(platform: str | None = None) -> dict:
    """The options :func:`compile` passes to XLA for ``platform`` (default: JAX's default
    backend): :data:`CPU_COMPILER_OPTIONS` on the CPU, none elsewhere."""
    import jax

    platform = jax.default_backend() if platform is None else platform
    return dict(CPU_COMPILER_OPTIONS) if platform == "cpu" else {}


def compile(lowered):
    """``lowered.compile()`` (a ``jax.stages.Lowered``) with :func:`compiler_options`."""
    return lowered.compile(compiler_options=compiler_options() or None)
