"""JAX's persistent compilation cache, switched on for bmczoo's programs.

Most of a small fit's time is XLA compiling the sweep.  JAX can store compiled programs on
disk and reuse them in later processes; this module turns that on with settings suited to
bmczoo (every program cached, whatever its compile time), under the user's cache folder.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["enable_compilation_cache", "default_compilation_cache_dir"]


def default_compilation_cache_dir() -> Path:
    """``jax/`` in bmczoo's cache folder (:func:`bmczoo.datasets.cache_root`: ``$BMCZOO_CACHE``,
    else ``$XDG_CACHE_HOME/bmczoo``, else ``~/.cache/bmczoo``): where
    :func:`enable_compilation_cache` stores programs."""
    from .datasets.movielens import cache_root

    return cache_root() / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Turn on JAX's persistent compilation cache for this process.

    A later process that compiles the same program (same model, shapes, settings, JAX
    version and XLA flags) loads it from disk instead of compiling it again, which removes
    most of a repeated fit's start-up time.  The cache holds compiled programs only, never
    data; deleting the folder is always safe.

    Parameters
    ----------
    path : str or path-like, optional
        The cache folder (created if needed).  Default:
        :func:`default_compilation_cache_dir` (``~/.cache/bmczoo/jax``).

    Returns
    -------
    pathlib.Path
        The folder in use.

    Notes
    -----
    JAX's ``jax_compilation_cache_dir`` option is process-wide: this call affects every
    JAX program compiled afterwards in this process, not only bmczoo's.  Programs compiled
    before the call are not written to the cache.
    """
    import jax

    folder = Path(path).expanduser() if path is not None else default_compilation_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # bmczoo's programs each compile in well under JAX's default 1 s threshold, and a fit
    # compiles several of them: cache them all.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
