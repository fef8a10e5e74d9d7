"""The hot path shared by the Gibbs sampler and VB: per-row Gaussian conditionals.

For every row ``i`` of ``M`` (rows of ``N`` are symmetric, with the roles swapped)

    P_i = Lambda + tau * sum_{k: i_k = i} E[N_j N_j^T]        (precision)
    r_i = Lambda mu + tau * sum_{k: i_k = i} Y_k E[N_j]        (right-hand side)

with the prior's row precision ``Lambda`` (``diag(1/gamma)`` for the column-scale priors
(Gibbs) or ``diag(E_q[1/gamma])`` (VB); a full K x K matrix for a hierarchical row
prior), its prior-mean term ``Lambda mu`` (zero for the column-scale priors), and ``E[N_j N_j^T] = N_j N_j^T``
(Gibbs) or ``n_j n_j^T + W_j`` (VB).  Both sums are sparse-times-dense products of the
CSR rating pattern with a dense matrix of per-item moments, so neither an ``n x K x K``
array nor the ``m1 x m2`` matrix is ever built.  Chains are stacked as extra dense
columns of one sparse product: ``jax.vmap`` over a BCSR product falls back to a much
slower path (see ``benchmarks/bench_hot_path_variants.py``).

What makes it fast on CPU (measured in ``benchmarks/``; exact, only the float rounding
order differs from a naive dense computation):

* the second moments are symmetric, so only their ``K(K+1)/2`` upper-triangle entries go
  through the sparse product (55 columns instead of 100 for ``K = 10``), and the full
  ``K x K`` precisions are unpacked afterwards (one constant-index gather, cheap);
* the dense operand of every sparse product is zero-padded to a multiple of 8 columns
  (32 bytes): JAX's CPU kernel (Eigen, row-major) is much faster then (16 columns
  cost less than 10, 56 much less than 55);
* the Cholesky factorisation is LAPACK's (``lax.linalg.cholesky`` without
  ``jnp.linalg.cholesky``'s symmetrisation pass: the precisions are symmetric by
  construction), the solves ``lax.linalg.triangular_solve``; a Gibbs draw factorises the
  precision bordered by its right-hand side, which gives the first of its two solves
  (:func:`draw_rows`: one LAPACK call less per row).  Unrolling them into
  element-wise XLA operations over the batch of rows is faster on those steps at
  100K-1M scale but adds seconds of compilation to one Gibbs step (more for larger K), a
  net loss for the typical run of about a thousand sweeps of a small problem, so it is not
  used (``benchmarks/bench_hot_path_variants.py`` measures both).

On other backends (GPU) the BCSR product is slow (cuSPARSE, many columns): every sparse
product goes through :func:`pattern_product`, which picks per CSR between the BCSR
product and a *sorted segment sum* (gather ``dense[index]``, scale by the entries, and
``jax.ops.segment_sum`` over the per-entry row ids with ``indices_are_sorted=True``),
with the ``n x W`` temporaries chunked over the entries so that memory stays bounded at
large ``K`` (:data:`SEGMENT_CHUNK_BYTES`).  The choice is stamped into the CSR when it is
built (``hot_path``, static pytree metadata, so jit caches stay correct):
:func:`set_hot_path` / :func:`use_hot_path` set ``"auto"`` (on CPU ``"gram"`` when the
compiled kernel is built, else ``"bcsr"``; segment sums on other platforms, decided by
the platform of the CSR's device), ``"bcsr"``, ``"segment"`` or ``"gram"``.  All paths
compute the same sums; only the float rounding order differs.

On the CPU the per-row Gram matrices ``sum_j N_j N_j^T`` of a Gibbs half sweep are the
largest product (``K(K+1)/2`` numbers per rating go through the caches, and at ``K = 32``
the product is bound by moving them, not by arithmetic).  The ``"gram"`` path computes
them with a compiled kernel instead (:func:`pattern_gram`, ``bmczoo._native``): each row's
factor rows are gathered into a buffer that stays in the L1 cache and multiplied as a
symmetric rank-``n_i`` update with the accumulators in registers, ``K`` numbers per rating
moved; it writes the full symmetric ``K x K`` matrices, so no unpacking follows.  The
other products (the right-hand sides, the biases' sums, VB's moments) stay BCSR products.

All functions take a leading chain axis ``C`` on the factor arrays.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

from . import _native

__all__ = [
    "CSR",
    "features_product",
    "csr_from_view",
    "pattern_gram",
    "GramSums",
    "uses_gram_kernel",
    "GRAM_MIN_K",
    "csr_matmul",
    "device_array",
    "pattern_product",
    "set_hot_path",
    "get_hot_path",
    "use_hot_path",
    "resolve_hot_path",
    "row_ids",
    "HOT_PATHS",
    "row_precision",
    "row_rhs",
    "prior_precision_term",
    "cholesky_rows",
    "sample_rows",
    "overrelaxed_rows",
    "draw_rows",
    "ROW_DRAWS",
    "solve_rows",
    "outer",
    "pack_upper",
    "unpack_upper",
    "packed_position",
]

#: how a sweep draws its rows (``SweepOptions.row_draw``): :func:`draw_rows` (one
#: factorisation of the bordered precision, one solve) or the factorisation of ``P`` and
#: two solves (:func:`overrelaxed_rows`; the same law, other rounding)
ROW_DRAWS = ("bordered", "two-solves")

#: dense operands of the sparse products are padded to a multiple of this many columns
COLUMN_MULTIPLE = 8

#: the segment-sum path builds its ``entries x W`` temporaries (the gathered, scaled rows
#: of the dense operand) in chunks of about this many bytes, one chunk at a time
SEGMENT_CHUNK_BYTES = 256 << 20

#: the hot-path settings: ``"auto"`` (on CPU the compiled Gram kernel when built, else BCSR;
#: segment sums elsewhere), or one path
HOT_PATHS = ("auto", "bcsr", "segment", "gram")

_hot_path = "auto"


def _check_hot_path(mode: str) -> str:
    if mode not in HOT_PATHS:
        raise ValueError(f"hot path must be one of {HOT_PATHS}, got {mode!r}")
    return mode


def set_hot_path(mode: str) -> None:
    """Set the hot path of the CSRs built from now on (:func:`csr_from_view`,
    :func:`bmczoo.inference.sharding.shard_csr`).

    Parameters
    ----------
    mode : {"auto", "bcsr", "segment", "gram"}
        ``"auto"`` (the default: ``"gram"`` on CPU when the compiled kernel is built, else
        ``"bcsr"``; sorted segment sums on other platforms), ``"bcsr"`` (JAX's BCSR
        product), ``"segment"`` (chunked sorted segment sums) or ``"gram"`` (the
        compiled CPU kernel for the per-row Gram matrices, :func:`pattern_gram`, and BCSR
        products for the rest; an error where the kernel is not built).
    """
    global _hot_path
    _hot_path = _check_hot_path(mode)


def get_hot_path() -> str:
    """The current setting of :func:`set_hot_path`."""
    return _hot_path


@contextlib.contextmanager
def use_hot_path(mode: str):
    """``with use_hot_path("segment"): ...``: :func:`set_hot_path` for a block.

    Parameters
    ----------
    mode : {"auto", "bcsr", "segment", "gram"}
        The hot path inside the block; the previous setting is restored on exit.
    """
    old = _hot_path
    set_hot_path(mode)
    try:
        yield
    finally:
        set_hot_path(old)


def resolve_hot_path(mode: str | None = None, platform: str | None = None) -> str:
    """The concrete path (``"bcsr"``, ``"segment"`` or ``"gram"``) of setting ``mode``
    (None: the current one) on ``platform`` (None: ``jax.default_backend()``).

    ``"gram"`` needs the compiled CPU kernel (``bmczoo._native.available()``): asked for
    on another platform or where it is not built, it is an error naming the other paths.
    """
    mode = _check_hot_path(_hot_path if mode is None else mode)
    platform = jax.default_backend() if platform is None else platform
    if mode == "gram" and (platform != "cpu" or not _native.available()):
        why = "runs on the CPU only" if platform != "cpu" else "is not built or does not load"
        raise ValueError(
            f"hot path 'gram': bmczoo's compiled Gram kernel {why} (bmczoo._native); "
            "use 'auto', 'bcsr' or 'segment'"
        )
    if mode != "auto":
        return mode
    if platform != "cpu":
        return "segment"
    if _native.available():
        return "gram"
    _native.note_fallback()
    return "bcsr"


def _platform(x) -> str | None:
    try:
        return next(iter(x.devices())).platform
    except Exception:  # a tracer or an array without a device
        return None


class CSR(NamedTuple):
    """Rows of a sparse ``m x m_other`` matrix (the rating pattern), device arrays.

    ``indptr`` (m+1,) int32, ``index`` (n,) int32, ``values`` (n,) float, ``ones`` (n,)
    float of the same dtype (the pattern, for the precision products), ``row_ids`` (n,)
    int32 the row of each entry (sorted; for the segment-sum path; an entry with row id
    ``>= m`` is dropped, as are the padding entries of a sharded block).  ``shape`` and
    ``hot_path`` (``"bcsr"``, ``"segment"`` or ``"auto"``: decided by
    ``jax.default_backend()`` when traced) are static metadata.
    """

    indptr: jax.Array
    index: jax.Array
    values: jax.Array
    ones: jax.Array
    shape: tuple[int, int]
    row_ids: jax.Array | None = None
    hot_path: str = "auto"

    def with_hot_path(self, mode: str) -> "CSR":
        """This CSR with its product path set to ``mode`` (``"auto"`` is resolved now, by
        the platform of the CSR's arrays)."""
        return self._replace(hot_path=resolve_hot_path(mode, _platform(self.index)))


# CSR carries a static shape and path: register it so it can be passed through jit as a pytree.
jax.tree_util.register_pytree_node(
    CSR,
    lambda c: ((c.indptr, c.index, c.values, c.ones, c.row_ids), (c.shape, c.hot_path)),
    lambda aux, xs: CSR(*xs[:4], aux[0], xs[4], aux[1]),
)


def row_ids_from_indptr(indptr, n: int | None = None) -> np.ndarray:
    """(n,) int32 row of each entry of a CSR with row pointer ``indptr`` (host arrays)."""
    indptr = np.asarray(indptr, np.int64)
    ids = np.repeat(np.arange(indptr.size - 1, dtype=np.int32), np.diff(indptr))
    if n is not None and n > ids.size:  # padding entries: an out-of-range row, dropped
        ids = np.concatenate([ids, np.full(n - ids.size, indptr.size - 1, np.int32)])
    return ids


def csr_from_view(view, shape: tuple[int, int], dtype, hot_path: str | None = None) -> CSR:
    """Device CSR from a :class:`bmczoo.data.SortedView` (int32 indices, ``dtype`` data).

    Parameters
    ----------
    view : bmczoo.data.SortedView
        The rows' (or columns') sorted view of the ratings.
    shape : tuple of int
        ``(m, m_other)``.
    dtype : dtype
        Dtype of the values.
    hot_path : {"auto", "bcsr", "segment"}, optional
        None: the :func:`set_hot_path` setting; ``"auto"`` is resolved by the platform of
        the default device.
    """
    values = device_array(view.values, dtype)
    index = device_array(view.index, jnp.int32)
    return CSR(
        indptr=device_array(view.indptr, jnp.int32),
        index=index,
        values=values,
        ones=device_array(np.ones(values.shape, values.dtype)),
        shape=tuple(shape),
        row_ids=device_array(row_ids_from_indptr(view.indptr)),
        hot_path=resolve_hot_path(hot_path, _platform(index)),
    )


def device_array(x, dtype=None) -> jax.Array:
    """``jnp.asarray(x, dtype)`` for a host array: converted by NumPy and copied to the
    default device, where ``jnp.asarray`` compiles an XLA program for each conversion (a
    few hundredths of a second each, before the first sweep)."""
    if isinstance(x, jax.Array):
        return jnp.asarray(x, dtype)
    return jax.device_put(np.asarray(x, dtype=dtype))


def csr_matmul(indptr, index, data, shape, dense):
    """``A @ dense`` for the CSR matrix ``A = (data, index, indptr)`` of static ``shape``.

    Uses ``jax.experimental.sparse.BCSR``, which reaches JAX's native CPU sparse kernel
    when indices are int32 and ``data`` has the dtype of ``dense``.  A 2-D ``dense`` is
    zero-padded to a multiple of :data:`COLUMN_MULTIPLE` columns for that kernel (the
    padding is sliced off the result).
    """
    a = sparse.BCSR((data, index, indptr), shape=shape, indices_sorted=True, unique_indices=True)
    if dense.ndim != 2:
        return a @ dense
    cols = dense.shape[1]
    pad = (-cols) % COLUMN_MULTIPLE
    if pad == 0:
        return a @ dense
    out = a @ jnp.pad(dense, ((0, 0), (0, pad)))
    return out[:, :cols]


def row_ids(csr: CSR) -> jax.Array:
    """The row of each stored entry of ``csr`` (its ``row_ids`` when it carries them)."""
    if csr.row_ids is not None:
        return csr.row_ids
    # (a CSR built by hand) from indptr: row i owns entries indptr[i] .. indptr[i+1]-1
    n = csr.index.shape[0]
    return jnp.searchsorted(
        csr.indptr[1:], jnp.arange(n, dtype=csr.indptr.dtype), side="right"
    ).astype(jnp.int32)


def segment_matmul(row_ids, index, data, num_rows: int, dense, chunk_bytes: int | None = None):
    """``A @ dense`` for the sparse ``A`` with entries ``data`` at ``(row_ids, index)``
    (``row_ids`` sorted; an id ``>= num_rows`` is dropped) as a sorted segment sum:
    ``sum_{k: row_ids[k] = i} data[k] * dense[index[k]]``.

    The ``entries x W`` temporaries are built ``chunk_bytes`` (None:
    :data:`SEGMENT_CHUNK_BYTES`) at a time: the entries are split into equal chunks run by
    a ``lax.scan`` that scatter-adds each chunk into the (num_rows, W) result.
    """
    squeeze = dense.ndim == 1
    if squeeze:
        dense = dense[:, None]
    n = index.shape[0]
    W = dense.shape[1]
    chunk_bytes = SEGMENT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    per = max(1, chunk_bytes // max(1, W * dense.dtype.itemsize))
    data = data.astype(dense.dtype)
    if n <= per:
        out = jax.ops.segment_sum(
            data[:, None] * dense[index], row_ids, num_segments=num_rows, indices_are_sorted=True
        )
    else:
        chunks = -(-n // per)
        per = -(-n // chunks)  # equal chunks, the last one padded with dropped entries
        pad = chunks * per - n
        ids = jnp.pad(row_ids, (0, pad), constant_values=num_rows).reshape(chunks, per)
        idx = jnp.pad(index, (0, pad)).reshape(chunks, per)
        val = jnp.pad(data, (0, pad)).reshape(chunks, per)

        def body(acc, xs):
            i, j, v = xs
            return acc.at[i].add(v[:, None] * dense[j], indices_are_sorted=True, mode="drop"), None

        out, _ = lax.scan(body, jnp.zeros((num_rows, W), dense.dtype), (ids, idx, val))
    return out[:, 0] if squeeze else out


def pattern_product(
    csr: CSR, data, dense, *, path: str | None = None, chunk_bytes: int | None = None
):
    """``A @ dense`` for the rating pattern of ``csr`` with entries ``data`` (``csr.values``
    or ``csr.ones``): dense (m_other, W) -> (m, W) (or (m_other,) -> (m,)).

    The hot path of every sparse product of the Gibbs sweep and of VB.

    Parameters
    ----------
    csr : CSR
        The rating pattern.
    data : jax.Array, shape (n,)
        The entries of the sparse matrix (``csr.values`` or ``csr.ones``).
    dense : jax.Array, shape (m_other, W) or (m_other,)
        The dense operand.
    path : {"auto", "bcsr", "segment", "gram"}, optional
        None: ``csr.hot_path``; ``"auto"`` is resolved by ``jax.default_backend()``;
        ``"bcsr"`` and ``"gram"``: :func:`csr_matmul`; ``"segment"``:
        :func:`segment_matmul`.
    chunk_bytes : int, optional
        The segment path's chunk size in bytes (default ``SEGMENT_CHUNK_BYTES``).
    """
    path = resolve_hot_path(csr.hot_path if path is None else path)
    if path in ("bcsr", "gram"):
        return csr_matmul(csr.indptr, csr.index, data, csr.shape, dense)
    return segment_matmul(row_ids(csr), csr.index, data, csr.shape[0], dense, chunk_bytes)


#: the smallest ``K`` at which a Gibbs half sweep on the ``"gram"`` path takes its Gram
#: matrices from the compiled kernel (:func:`uses_gram_kernel`): below it the sparse
#: product of the ``K(K+1)/2 <= 78`` packed outer products is as fast or faster
#: (``benchmarks/bench_gibbs.py --hot-path bcsr`` against ``--hot-path gram``)
GRAM_MIN_K = 13


def uses_gram_kernel(csr: CSR, K: int) -> bool:
    """Whether a half sweep over ``csr``'s rows with ``K`` columns takes its Gram matrices
    from the compiled kernel: on the ``"gram"`` path at ``K >= GRAM_MIN_K``.

    Parameters
    ----------
    csr : CSR
        The rating pattern of the rows being updated (its ``hot_path``).
    K : int
        The number of columns of the factors.
    """
    return resolve_hot_path(csr.hot_path) == "gram" and K >= GRAM_MIN_K


class GramSums(NamedTuple):
    """:func:`pattern_gram`'s sums: ``G`` (C, m, K, K), ``Gp`` its packed upper triangles
    (C, m, K(K+1)/2) or None, ``S`` (C, m, Q, K) and ``Sw`` (C, m, Q) or None."""

    G: jax.Array
    Gp: jax.Array | None
    S: jax.Array | None
    Sw: jax.Array | None


def pattern_gram(
    csr: CSR,
    F: jax.Array,
    w: jax.Array | None = None,
    *,
    packed: bool = False,
    path: str | None = None,
    rating_weights: jax.Array | None = None,
) -> GramSums:
    """The per-row Gram matrices of the rating pattern of ``csr`` for each chain, and
    weighted sums of the same rows.

    ``G_i = sum_{j in row i} F_j F_j^T`` (C, m, K, K), symmetric; with ``packed`` also its
    upper triangles row by row (``pack_upper``'s layout); with weights ``w``
    (C, m_other, Q) also ``S_iq = sum_{j in row i} w_jq F_j`` (C, m, Q, K) and
    ``Sw_iq = sum_{j in row i} w_jq`` (C, m, Q) (the biases' sums take ``w = [c, 1]``);
    with ``rating_weights`` ``r`` (C, n) every term of rating ``(i, j)`` is multiplied by
    its ``r_ij`` (a scale mixture's weights).
    On the ``"gram"`` path the compiled CPU kernel computes them all in one pass over the
    ratings (``bmczoo._native.gram``); else one sparse product of the pattern with the
    packed outer products and the weighted rows (:func:`pattern_product`,
    ``unpack_upper``), the chains stacked as columns.  The two agree up to float
    rounding.

    Parameters
    ----------
    csr : CSR
        The rating pattern (``csr.ones``: every entry counts once).
    F : jax.Array, shape (C, m_other, K)
        The other factor's rows per chain.
    w : jax.Array, shape (C, m_other, Q), optional
        Per-row weights of ``F``.
    packed : bool
        Also return the packed upper triangles.
    path : {"auto", "bcsr", "segment", "gram"}, optional
        None: ``csr.hot_path``.
    rating_weights : jax.Array, shape (C, n), optional
        Per-chain weights of the ratings, in ``csr``'s order (one sparse product per chain
        off the kernel's path).

    Returns
    -------
    GramSums
        ``(G, Gp, S, Sw)``; ``Gp`` None without ``packed``, ``S`` and ``Sw`` None
        without ``w``.
    """
    C, m_other, K = F.shape
    if resolve_hot_path(csr.hot_path if path is None else path) == "gram":
        G, Gp, S, Sw = _native.gram(csr.indptr, csr.index, F, w, packed, rating_weights)
        if w is None:
            S = Sw = None
        return GramSums(G, Gp if packed else None, S, Sw)
    T = K * (K + 1) // 2
    parts = [pack_upper(outer(F))]
    if w is not None:
        Q = w.shape[-1]
        parts += [(w[..., :, None] * F[..., None, :]).reshape(C, m_other, Q * K), w]
    W = sum(p.shape[-1] for p in parts)
    if rating_weights is not None:  # each chain's own pattern values: one product per chain
        dense = jnp.concatenate(parts, -1)
        out = jnp.stack(
            [pattern_product(csr, rating_weights[c], dense[c], path=path) for c in range(C)]
        )
    else:
        dense = jnp.transpose(jnp.concatenate(parts, -1), (1, 0, 2)).reshape(m_other, C * W)
        out = pattern_product(csr, csr.ones, dense, path=path)
        out = jnp.transpose(out.reshape(csr.shape[0], C, W), (1, 0, 2))
    Gp = out[..., :T]
    G = unpack_upper(Gp, K)
    if w is None:
        return GramSums(G, Gp if packed else None, None, None)
    S = out[..., T : T + Q * K].reshape(C, csr.shape[0], Q, K)
    return GramSums(G, Gp if packed else None, S, out[..., T + Q * K :])


def features_product(X, W: jax.Array) -> jax.Array:
    """``X @ W`` of a feature table ``X`` (:class:`bmczoo.data.Features`, ``(n, F)``) and
    ``W`` ``(F, ...)`` in traced code (the NumPyro models' links), without the dense
    ``n x F`` table: a sorted segment sum over its entries (``nnz`` rows of ``W``
    gathered; differentiable in ``W``).  An implicit-feedback table of ML-10M's users is
    70,000 x 10,700 (6 GB dense in float64) with 8 million entries."""
    rows = jnp.asarray(X.row_ids(), jnp.int32)
    cols = jnp.asarray(X.indices, jnp.int32)
    vals = jnp.asarray(X.values, W.dtype).reshape((-1,) + (1,) * (W.ndim - 1))
    return jax.ops.segment_sum(vals * W[cols], rows, num_segments=X.n_rows, indices_are_sorted=True)


def outer(F: jax.Array) -> jax.Array:
    """Per-row outer products ``F_j F_j^T``: (C, m, K) -> (C, m, K, K)."""
    return F[..., :, None] * F[..., None, :]


@functools.lru_cache(maxsize=None)
def packed_position(K: int) -> np.ndarray:
    """(K, K) position of entry ``(i, j)`` in the packed upper triangle of
    :func:`pack_upper` (symmetric): ``G[..., packed_position(K)[h]]`` is column ``h`` of
    the matrix packed in ``G``."""
    iu, ju = np.triu_indices(K)
    pos = np.zeros((K, K), dtype=np.int64)
    pos[iu, ju] = np.arange(iu.size)
    pos[ju, iu] = np.arange(iu.size)
    return pos


def pack_upper(S: jax.Array) -> jax.Array:
    """Upper triangles of symmetric (..., K, K) matrices, row by row: (..., K(K+1)/2).

    One gather with a constant index (fused by XLA with the producer of ``S``, e.g.
    :func:`outer`, so only the needed products are computed): one kernel, where a slice
    per row of the triangle compiles to a kernel each.
    """
    K = S.shape[-1]
    iu, ju = np.triu_indices(K)
    return jnp.take(S.reshape(*S.shape[:-2], K * K), iu * K + ju, axis=-1)


def unpack_upper(G: jax.Array, K: int) -> jax.Array:
    """Inverse of :func:`pack_upper`: (..., K(K+1)/2) -> symmetric (..., K, K).

    One gather with a constant index along the last axis (measured faster on CPU than
    assembling the rows from static slices).
    """
    pos = packed_position(K).reshape(-1)
    return jnp.take(G, pos, axis=-1).reshape(*G.shape[:-1], K, K)


def prior_precision_term(prior_precision: jax.Array, K: int, dtype) -> jax.Array:
    """The prior's precision as a (C, 1, K, K) term added to every row's precision:
    ``prior_precision`` (C, K) is a diagonal ``diag(w)`` (column scales), (C, K, K) a full
    matrix shared by the rows (e.g. a Normal-Wishart ``Lambda``)."""
    w = jnp.asarray(prior_precision, dtype)
    if w.ndim == 2:
        return w[:, None, :, None] * jnp.eye(K, dtype=dtype)
    if w.ndim == 3 and w.shape[-2:] == (K, K):
        return w[:, None]
    raise ValueError(
        f"prior_precision must have shape (C, K) or (C, K, K) with K={K}, got {w.shape}"
    )


def row_precision(csr: CSR, second_moment: jax.Array, prior_precision: jax.Array, tau) -> jax.Array:
    """Row precisions ``Lambda + tau * sum_j second_moment[j]``.

    Parameters
    ----------
    csr : CSR of the rows being updated (``m x m_other``).
    second_moment : (C, m_other, K, K) per-item ``E[N_j N_j^T]``, symmetric (only its
        upper triangle is read).
    prior_precision : ``Lambda``: (C, K) for ``diag(1/gamma)`` or ``diag(E[1/gamma])``, or
        (C, K, K) for a full prior precision shared by the rows.
    tau : likelihood precision.

    Returns
    -------
    (C, m, K, K) symmetric precisions.
    """
    C, m_other, K, _ = second_moment.shape
    T = K * (K + 1) // 2
    packed = pack_upper(second_moment)  # (C, m_other, T)
    dense = jnp.transpose(packed, (1, 0, 2)).reshape(m_other, C * T)
    G = pattern_product(csr, csr.ones, dense)  # (m, C T)
    G = jnp.transpose(G.reshape(csr.shape[0], C, T), (1, 0, 2))
    return tau * unpack_upper(G, K) + prior_precision_term(prior_precision, K, G.dtype)


def row_rhs(csr: CSR, mean: jax.Array, tau, prior_shift: jax.Array | None = None) -> jax.Array:
    """Right-hand sides ``tau * sum_j Y_ij mean[j] + prior_shift``: mean (C, m_other, K) ->
    (C, m, K); ``prior_shift`` (C, K) is the prior-mean term ``Lambda mu`` of a prior with
    a non-zero mean (None: zero, the column-scale priors)."""
    C, m_other, K = mean.shape
    dense = jnp.transpose(mean, (1, 0, 2)).reshape(m_other, C * K)
    r = pattern_product(csr, csr.values, dense)
    out = tau * jnp.transpose(r.reshape(csr.shape[0], C, K), (1, 0, 2))
    return out if prior_shift is None else out + prior_shift[:, None, :]


def cholesky_rows(P: jax.Array) -> jax.Array:
    """Batched lower Cholesky factors of (..., K, K) symmetric precisions (NaN where not
    PD).  Only the lower triangle of ``P`` is read (no symmetrisation pass)."""
    return lax.linalg.cholesky(P, symmetrize_input=False)


def _tri(L, b, transpose: bool):
    # (..., K, K) triangular solve against (..., K) vectors
    return lax.linalg.triangular_solve(
        L, b[..., None], left_side=True, lower=True, transpose_a=transpose
    )[..., 0]


def sample_rows(L: jax.Array, rhs: jax.Array, z: jax.Array) -> jax.Array:
    """Draw ``x ~ N(P^{-1} rhs, P^{-1})`` for each row, with ``P = L L^T``, given
    standard normals ``z`` of the shape of ``rhs``.

    ``x = L^{-T} (L^{-1} rhs + z)``: two triangular solves, no inverse.
    """
    return _tri(L, _tri(L, rhs, False) + z, True)


def overrelaxed_rows(
    L: jax.Array, rhs: jax.Array, z: jax.Array, x: jax.Array, rho: float
) -> jax.Array:
    """Adler's over-relaxed update of ``x`` for the Gaussian ``N(mu, P^{-1})``, with
    ``P = L L^T`` and ``mu = P^{-1} rhs``, given standard normals ``z``:

        x' = mu + rho (x - mu) + sqrt(1 - rho^2) L^{-T} z
           = L^{-T} [(1 - rho) L^{-1} rhs + sqrt(1 - rho^2) z + rho L^T x].

    If ``x ~ N(mu, P^{-1})`` so is ``x'`` (covariance ``rho^2 + (1 - rho^2)`` times
    ``P^{-1}``), and the pair ``(x, x')`` is exchangeable, so the update is reversible
    with respect to the exact conditional for ``-1 < rho < 1`` (no accept/reject step).
    ``rho = 0`` is :func:`sample_rows` exactly; ``rho < 0`` gives anti-correlated
    successive draws (Adler 1981; Neal 1998).  ``rho`` is a static Python float.
    """
    if rho == 0.0:
        return sample_rows(L, rhs, z)
    LTx = jnp.einsum("...kj,...k->...j", L, x)  # L^T x (L lower triangular)
    return _tri(L, _overrelaxed_target(_tri(L, rhs, False), z, LTx, rho), True)


def _overrelaxed_target(y, z, LTx, rho: float):
    """``(1 - rho) y + sqrt(1 - rho^2) z + rho L^T x`` with ``y = L^{-1} rhs``: the vector
    that ``L^{-T}`` maps to Adler's over-relaxed draw."""
    return (1.0 - rho) * y + math.sqrt(1.0 - rho * rho) * z + rho * LTx


def draw_rows(
    P: jax.Array, rhs: jax.Array, z: jax.Array, x: jax.Array | None = None, rho: float = 0.0
) -> jax.Array:
    """``overrelaxed_rows(cholesky_rows(P), rhs, z, x, rho)`` (``sample_rows`` for
    ``rho = 0``) with one Cholesky factorisation and one triangular solve per row.

    The Cholesky factor of the bordered matrix ``[[P, rhs], [rhs^T, s]]`` is
    ``[[L, 0], [y^T, t]]`` with ``L y = rhs``: the factorisation gives the first solve
    ``y = L^{-1} rhs`` as its last row (forward substitution inside the factorisation),
    and the bordered factor solves ``L^T x = u`` against ``[u, 0]`` (its last component
    is 0, so the border drops out).  On the CPU every row's triangular solve is a LAPACK
    call of its own, whose cost at K = 10 to 32 is mostly the call's.  ``s`` is a quarter
    of the dtype's largest value, so the border is positive definite whenever
    ``|y|^2 = rhs^T P^{-1} rhs`` is below it; a ``P`` that is not positive definite, a
    non-finite ``y`` or one beyond that bound gives NaN rows, as ``cholesky_rows`` does
    for the first.  Only the lower triangle of ``P`` is read.

    Parameters
    ----------
    P : jax.Array, shape (..., K, K)
        Symmetric precisions.
    rhs : jax.Array, shape (..., K)
        Right-hand sides: the conditional means are ``P^{-1} rhs``.
    z : jax.Array, shape (..., K)
        Standard normals.
    x : jax.Array, shape (..., K), optional
        The current rows (only with ``rho != 0``).
    rho : float
        Adler's over-relaxation (static; see ``overrelaxed_rows``).

    Returns
    -------
    jax.Array, shape (..., K)
        The new rows.
    """
    K = P.shape[-1]
    dtype = P.dtype
    corner = jnp.full((*rhs.shape[:-1], 1), np.finfo(dtype).max / 4, dtype)
    bordered = jnp.concatenate(
        [
            jnp.concatenate([P, rhs[..., None, :]], axis=-2),
            jnp.concatenate([rhs, corner], axis=-1)[..., :, None],
        ],
        axis=-1,
    )
    L = cholesky_rows(bordered)  # (..., K + 1, K + 1)
    y = L[..., K, :K]  # L^{-1} rhs
    zero = jnp.zeros_like(corner)
    if rho != 0.0:
        # L^T x from the bordered factor against (x, 0): its border row meets the 0
        LTx = jnp.einsum("...kj,...k->...j", L, jnp.concatenate([x, zero], axis=-1))
        u = _overrelaxed_target(y, z, LTx[..., :K], rho)
    else:
        u = y + z
    return _tri(L, jnp.concatenate([u, zero], axis=-1), True)[..., :K]


def solve_rows(L: jax.Array, rhs: jax.Array) -> jax.Array:
    """Posterior means ``P^{-1} rhs`` for each row."""
    return _tri(L, _tri(L, rhs, False), True)
