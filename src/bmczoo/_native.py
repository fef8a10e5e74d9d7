"""The compiled CPU kernel of the Gibbs sweep: the per-row Gram matrices
``sum_j F_j F_j^T`` over a rating pattern (``src/bmczoo/_gram.cc``, an XLA FFI custom
call built by ``setup.py`` when a C++ compiler is at hand).

:func:`available` says whether it was built and loads; ``bmczoo.linalg`` then resolves the
CPU's ``"auto"`` hot path to ``"gram"`` (:func:`bmczoo.linalg.resolve_hot_path`).

One environment variable, ``BMCZOO_NATIVE``, governs the kernel both when the package is
built and when it runs (:func:`mode`):

- unset or ``auto``: built where a compiler and jaxlib's FFI headers are at hand, used when
  it loads; a CPU run without it says so once (:func:`note_fallback`);
- ``0`` (``off``): neither built nor used;
- ``1`` (``required``): a build without it fails, and so does a run where it does not load.

Nothing here imports the library before it is needed.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
import os
import sys
from pathlib import Path

__all__ = ["available", "gram", "mode", "status", "note_fallback", "ENV", "MODES", "TARGET"]

#: the custom call's name in XLA's registry (CPU)
TARGET = "bmczoo_gram"

#: the environment variable of the kernel (build and run)
ENV = "BMCZOO_NATIVE"

#: the settings of :data:`ENV`, by the words each accepts
MODES = {
    "auto": ("", "auto"),
    "off": ("0", "off", "false", "no"),
    "required": ("1", "on", "true", "yes", "required", "require"),
}

_log = logging.getLogger("bmczoo")


def mode() -> str:
    """The kernel's setting from ``BMCZOO_NATIVE``: ``"auto"``, ``"off"`` or ``"required"``.

    Raises
    ------
    ValueError
        If the variable holds a word none of the settings accepts.
    """
    word = os.environ.get(ENV, "").strip().lower()
    for name, words in MODES.items():
        if word in words:
            return name
    accepted = ", ".join(repr(w) for words in MODES.values() for w in words if w)
    raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected one of {accepted} (or unset)")


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_gram_cpu{suffix}"
        if path.is_file():
            return path
    return None


@functools.cache
def status() -> tuple[bool, str]:
    """Whether the kernel is loaded and registered with JAX (tried once per process), and
    a description: the library's path, or why it is not in use."""
    if mode() == "off":
        return False, f"turned off ({ENV}=0)"
    path = _library_path()
    if path is None:
        return False, "not built (the install had no C++17 compiler or no jaxlib FFI headers)"
    try:
        lib = ctypes.cdll.LoadLibrary(str(path))
        import jax

        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.BmczooGram), platform="cpu")
    except (OSError, AttributeError, RuntimeError, ValueError) as e:  # a broken or foreign build
        return False, f"{path.name} does not load ({type(e).__name__}: {e})"
    return True, str(path)


def available() -> bool:
    """True when the compiled kernel is built, loads, and is registered with JAX (once per
    process); False when it is not built, turned off (``BMCZOO_NATIVE=0``), or loading fails.

    Raises
    ------
    RuntimeError
        With ``BMCZOO_NATIVE=1`` (required) when the kernel is not in use, saying why.
    """
    loaded, why = status()
    if not loaded and mode() == "required":
        raise RuntimeError(f"bmczoo's compiled Gram kernel is required ({ENV}=1) but {why}")
    return loaded


@functools.cache
def note_fallback() -> None:
    """Say once, on the ``bmczoo`` logger, that a CPU sweep runs without the kernel where it
    should have been built (not on Windows, not turned off): the sweep is then slower."""
    loaded, why = status()
    if loaded or mode() == "off" or sys.platform == "win32":
        return
    _log.warning(
        "bmczoo: the compiled Gram kernel is %s; the CPU sweep uses JAX's sparse product "
        "(slower). Reinstall with a C++17 compiler to build it, or set %s=0 to silence this.",
        why,
        ENV,
    )


def gram(indptr, index, F, w=None, packed: bool = False, rating_weights=None):
    """By the compiled kernel (CPU only; requires :func:`available`), for the CSR pattern
    ``(indptr (m+1,), index (n,))`` (int32), ``F`` (C, m_other, K) float32 or float64,
    per-row weights ``w`` (C, m_other, Q) of ``F`` (None: Q = 0) and per-rating weights
    ``rating_weights`` (C, n) ``r_p`` (None: ones) that multiply every term of rating ``p``:

    - ``G[c, i] = sum_{p in row i} r_p F[c, j_p] F[c, j_p]^T`` (C, m, K, K), symmetric;
    - ``Gp``: its upper triangles row by row (C, m, K(K+1)/2) with ``packed``, else
      (C, m, 0) (``bmczoo.linalg.pack_upper``'s layout, written from the same registers);
    - ``S[c, i, q] = sum_{p in row i} r_p w[c, j_p, q] F[c, j_p]`` (C, m, Q, K);
    - ``Sw[c, i, q] = sum_{p in row i} r_p w[c, j_p, q]`` (C, m, Q);

    with ``j_p = index[p]``, returned as ``(G, Gp, S, Sw)``.  An out-of-range column index
    is an error of the call."""
    import jax
    import jax.numpy as jnp

    if not available():
        raise RuntimeError("bmczoo's compiled Gram kernel is not available (see bmczoo._native)")
    C, m_other, K = F.shape
    if w is None:
        w = jnp.zeros((C, m_other, 0), F.dtype)
    Q = w.shape[-1]
    if rating_weights is None:
        rating_weights = jnp.zeros((C, 0), F.dtype)
    m = indptr.shape[0] - 1
    T = K * (K + 1) // 2 if packed else 0
    shapes = [(C, m, K, K), (C, m, T), (C, m, Q, K), (C, m, Q)]
    out = [jax.ShapeDtypeStruct(shape, F.dtype) for shape in shapes]
    return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        indptr, index, F, w, rating_weights
    )
