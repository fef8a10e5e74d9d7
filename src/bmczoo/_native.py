"""The compiled CPU kernel of the Gibbs sweep: the per-row Gram matrices
``sum_j F_j F_j^T`` over a rating pattern (``src/bmczoo/_gram.cc``, an XLA FFI custom
call built by ``setup.py`` when a C++ compiler is at hand).

:func:`available` says whether it was built and loads; ``bmczoo.linalg`` then resolves the
CPU's ``"auto"`` hot path to ``"gram"`` (:func:`bmczoo.linalg.resolve_hot_path`).  Setting
the environment variable ``BMCZOO_NATIVE=0`` before the first fit leaves it unused.
Nothing here imports the library before it is needed.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
from pathlib import Path

__all__ = ["available", "gram", "TARGET"]

#: the custom call's name in XLA's registry (CPU)
TARGET = "bmczoo_gram"


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_gram_cpu{suffix}"
        if path.is_file():
            return path
    return None


@functools.cache
def available() -> bool:
    """True when the compiled kernel is built, loads, and is registered with JAX (once per
    process); False when it is not built, ``BMCZOO_NATIVE=0``, or loading fails."""
    if os.environ.get("BMCZOO_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    path = _library_path()
    if path is None:
        return False
    try:
        lib = ctypes.cdll.LoadLibrary(str(path))
        import jax

        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.BmczooGram), platform="cpu")
    except (OSError, AttributeError, RuntimeError, ValueError):  # a broken or foreign build
        return False
    return True


def gram(indptr, index, F, w=None, packed: bool = False):
    """By the compiled kernel (CPU only; requires :func:`available`), for the CSR pattern
    ``(indptr (m+1,), index (n,))`` (int32), ``F`` (C, m_other, K) float32 or float64 and
    per-row weights ``w`` (C, m_other, Q) of ``F`` (None: Q = 0):

    - ``G[c, i] = sum_{p in row i} F[c, j_p] F[c, j_p]^T`` (C, m, K, K), symmetric;
    - ``Gp``: its upper triangles row by row (C, m, K(K+1)/2) with ``packed``, else
      (C, m, 0) (``bmczoo.linalg.pack_upper``'s layout, written from the same registers);
    - ``S[c, i, q] = sum_{p in row i} w[c, j_p, q] F[c, j_p]`` (C, m, Q, K);
    - ``Sw[c, i, q] = sum_{p in row i} w[c, j_p, q]`` (C, m, Q);

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
    m = indptr.shape[0] - 1
    T = K * (K + 1) // 2 if packed else 0
    shapes = [(C, m, K, K), (C, m, T), (C, m, Q, K), (C, m, Q)]
    out = [jax.ShapeDtypeStruct(shape, F.dtype) for shape in shapes]
    return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(indptr, index, F, w)
