"""The factor blocks of a sweep: all rows of ``M`` given ``N`` (and the row biases), then
all rows of ``N`` given ``M`` (docs/algorithms.md, "The Gibbs blocks"), one batched
Cholesky per side over the per-row sums of two sparse products; on one device or sharded
over a mesh (:mod:`bmczoo.inference.sharding`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...priors import Prior
from .. import sharding as sh
from ...linalg import (
    CSR,
    cholesky_rows,
    draw_rows,
    outer,
    overrelaxed_rows,
    pack_upper,
    pattern_gram,
    pattern_product,
    prior_precision_term,
    resolve_hot_path,
    unpack_upper,
    uses_gram_kernel,
)
from .state import GibbsProblem, GibbsState, pad_vec, padded_dims

__all__ = [
    "FactorRows",
    "MoveArrays",
    "RatingsView",
    "SweepConditional",
    "SweepResult",
    "SweepStats",
    "Side",
    "Conditional",
    "SweepFlags",
    "half_sweep",
    "row_sums",
    "sweep_factors",
]


class FactorRows(NamedTuple):
    """The rows a sweep draws, per chain: ``M`` (C, m1, K), ``N`` (C, m2, K), the row
    biases ``b`` (C, m1) and the column biases ``c`` (C, m2); also the standard normals
    that draw them (same shapes)."""

    M: jax.Array
    N: jax.Array
    b: jax.Array
    c: jax.Array


class RatingsView(NamedTuple):
    """What a likelihood's per-rating block gives the factor blocks, per chain, in the
    order of one side's ratings: ``values`` (C, n) that replace the ratings (a latent
    likelihood's ``z``) and ``weights`` (C, n), rating ``k``'s precision ``tb w_k`` (a
    scale mixture such as Student-t); None: the ratings, unit weights.  ``unrated``: the
    weight of every pair that is not a rating, observed as 0 (an ``all_pairs``
    likelihood's, e.g. one-class; needs ``weights``); None: the ratings alone."""

    values: jax.Array | None = None
    weights: jax.Array | None = None
    unrated: float | None = None


class Side(NamedTuple):
    """The operands of half a sweep: the ratings grouped by the rows being updated
    (``csr``), those rows ``own`` (C, m, K), the other factor ``other`` (C, m_other, K, all
    rows), the biases ``bias_own`` (C, m) and ``bias_other`` (C, m_other), and the fields
    of a :class:`RatingsView` (``values``, ``weights``)."""

    csr: CSR
    own: jax.Array
    other: jax.Array
    bias_own: jax.Array
    bias_other: jax.Array
    values: jax.Array | None = None
    weights: jax.Array | None = None
    unrated: float | None = None


class Conditional(NamedTuple):
    """The rows' conditional besides the data: ``prior = (precision, shift)`` the rows'
    prior, ``tb`` (C,) the block precision, ``inv_var`` (C,) ``1/s^2`` of the biases,
    ``bias_mean`` (C, m) the biases' prior means (feature-driven biases; None: zero)."""

    prior: tuple
    tb: jax.Array
    inv_var: jax.Array
    bias_mean: jax.Array | None = None


class SweepConditional(NamedTuple):
    """What both halves of a sweep condition on besides the rows: ``priors`` the rows'
    priors ``(pM, pN)`` (each ``(precision, shift)``; on a mesh with feature links, the
    prior's state, from which each device computes its rows' priors), ``tb`` (C,) the block
    precision, ``inv_var`` (C, 2) the biases' precisions ``1/s^2`` and ``bias_means`` the
    biases' prior means ((C, m1) or None, (C, m2) or None: feature-driven biases)."""

    priors: tuple
    tb: jax.Array
    inv_var: jax.Array
    bias_means: tuple = (None, None)


class MoveArrays(NamedTuple):
    """The arrays of the column moves inside the sweep: ``gamma`` (C, K), the two sides'
    ``draws`` (padded as the rows on a mesh) and ``due`` (whether they run this sweep;
    None: every sweep)."""

    gamma: jax.Array
    draws: tuple
    due: jax.Array | None


class SweepStats(NamedTuple):
    """What a sweep's factor blocks sum over rows (psum-ed over devices): the prior's
    statistics of ``M`` (``sM``) and of ``N`` (``sN``), ``part`` (C,) the factor blocks'
    part of the squared error, ``sumsq`` (C, 2) the biases' sums of squares."""

    sM: object
    sN: object
    part: jax.Array
    sumsq: jax.Array


class SweepResult(NamedTuple):
    """The factor blocks' result: the new rows ``M``, ``N`` and biases ``b``, ``c``, the
    non-finite masks ``badM`` (C, m1), ``badN`` (C, m2), the :class:`SweepStats` and, with
    the moves inside the sweep, the moved ``gamma`` (else None)."""

    M: jax.Array
    N: jax.Array
    b: jax.Array
    c: jax.Array
    badM: jax.Array
    badN: jax.Array
    stats: SweepStats
    gamma: jax.Array | None = None

    @classmethod
    def specs(cls, rows, vector, replicated, moves: bool):
        """The partition specs of a sharded result: ``rows`` for the factors, ``vector``
        for the biases and masks, ``replicated`` for the sums (and ``gamma``)."""
        gamma = replicated if moves else None
        return cls(rows, rows, vector, vector, vector, vector, replicated, gamma)


class SweepFlags(NamedTuple):
    """Static switches of the factor blocks: ``rho`` the over-relaxation, ``use_bias`` (the
    model has biases), ``sse`` (compute the squared error of a learned ``tau``),
    ``bordered`` (draw the rows with :func:`~bmczoo.linalg.draw_rows`; False: two
    triangular solves, ``SweepOptions.row_draw="two-solves"``)."""

    rho: float
    use_bias: bool
    sse: bool
    bordered: bool = True


class RowSums(NamedTuple):
    """The per-row sums of half a sweep (:func:`row_sums`): ``Gp`` the packed upper
    triangles of ``G_i = sum_j N_j N_j^T`` (C, m, K(K+1)/2), ``G`` the same unpacked (C, m, K, K), ``r`` (C, m, K), and with biases ``sumO``,
    ``sumBO`` (C, m, K), ``sumB`` and ``sumY`` (C, m) (else None); with weights each
    term is multiplied by its rating's weight and ``count`` (C, m) holds the rows' sums of
    weights (None: unit weights, the rows' numbers of ratings)."""

    Gp: jax.Array | None
    G: jax.Array
    r: jax.Array
    sumO: jax.Array | None
    sumBO: jax.Array | None
    sumB: jax.Array | None
    sumY: jax.Array | None
    count: jax.Array | None = None


def side_sums(side: Side, use_bias: bool, packed: bool = False) -> RowSums:
    """:func:`row_sums` of ``side``."""
    return row_sums(
        side.csr,
        side.other,
        side.bias_other,
        use_bias,
        side.values,
        packed,
        side.weights,
        side.unrated,
    )


def transform_sums(sums: RowSums, T) -> RowSums:
    """The sums of ``side_sums`` for the other factor multiplied on the right by ``T``
    (``N' = N T``): ``G' = T^T G T``, ``r' = T^T r``, ``sumO'``, ``sumBO'`` likewise.
    ``T`` (C, K) stands for a diagonal matrix (a plain column move only rescales
    columns), else (C, K, K).  Exact linear maps of the sums, so that the fused column
    moves (:func:`bmczoo.inference.gibbs.fused_moves`) need no second pass over
    the ratings.

    Parameters
    ----------
    sums : RowSums
        The sums for the other factor ``N``.
    T : jax.Array, shape (C, K) or (C, K, K)
        The diagonal of ``T``, or ``T``, per chain.

    Returns
    -------
    RowSums
        The sums for ``N T``.
    """

    def vec(x):
        if x is None:
            return None
        return x * T[:, None, :] if T.ndim == 2 else jnp.einsum("cmk,ckl->cml", x, T)

    if T.ndim == 2:
        Gp = sums.Gp * pack_upper(outer(T[:, None, :]))
        G = sums.G * T[:, None, :, None] * T[:, None, None, :]
    else:  # two batched products over the chains (not one per row: see _packed_quadratic)
        G = jnp.einsum("ckl,cmkq->cmlq", T, jnp.einsum("cmkp,cpq->cmkq", sums.G, T))
        Gp = pack_upper(G)
    return RowSums(
        Gp, G, vec(sums.r), vec(sums.sumO), vec(sums.sumBO), sums.sumB, sums.sumY, sums.count
    )


def half_sweep(
    side: Side,
    z,
    zb,
    cond: Conditional,
    flags: SweepFlags,
    cross: bool = False,
    sums: RowSums | None = None,
):
    """Half a sweep: the biases of the rows being updated (with biases), then their factor
    rows (exact Gaussian conditionals, docs/algorithms.md, "Rows of the factors" and
    "Normal-Wishart rows").

    ``side`` (:class:`Side`) the operands, ``z`` (C, m, K) and ``zb`` (C, m) the standard
    normals of the rows and of their biases, ``cond`` (:class:`Conditional`) the rows'
    prior, block precision and bias precision.  One sparse product with the rating pattern
    gives the per-row sums ``sum_j N_j N_j^T`` (packed), and with biases ``sum_j N_j``,
    ``sum_j c_j N_j`` and ``sum_j c_j``; one with the ratings gives ``sum_j Y_ij N_j`` (and
    ``sum_j Y_ij``).  The rows' right-hand side uses the residual ``Y_ij - b_i - c_j``.

    Returns the new rows, the new biases, a (C, m) non-finite mask and, with ``flags.sse``,
    this side's part of ``SSE - sum Y^2`` (C,) (``cross``: the terms that need both sides'
    final values, computed on the second side).  ``sums``: the per-row sums when already at
    hand (:func:`side_sums`; the fused column moves transform them, :func:`transform_sums`).
    """
    csr, own, other, bias_own = side.csr, side.own, side.other, side.bias_own
    rho, use_bias, sse, bordered = flags
    tb, inv_var = cond.tb, cond.inv_var
    C, m_other, K = other.shape
    dtype = other.dtype
    if sums is None:
        sums = side_sums(side, use_bias)
    Gp, G, r, sumO, sumBO, sumB, sumY, count = sums
    part = jnp.zeros((C,), dtype)
    if use_bias:
        if count is None:
            count = jnp.diff(csr.indptr).astype(dtype)
        p = inv_var[:, None] + tb[:, None] * count
        data = tb[:, None] * (sumY - sumB - jnp.sum(own * sumO, axis=-1))
        if cond.bias_mean is not None:  # b_i ~ N(x_i^T w, s^2): the prior mean's term
            data = data + inv_var[:, None] * cond.bias_mean
        mean = data / p
        bias_own = mean + zb * lax.rsqrt(p)
        r = r - bias_own[..., None] * sumO - sumBO
        if sse:
            part = part + jnp.sum(bias_own * (count * bias_own - 2.0 * sumY), axis=-1)
            if cross:
                part = part + 2.0 * jnp.sum(bias_own * sumB, axis=-1)
    precision, shift = cond.prior
    P = tb[:, None, None, None] * G + prior_precision_term(precision, K, dtype)
    rhs = tb[:, None, None] * r
    if shift is not None:  # (C, K), or per row (C, m, K) with a feature link
        rhs = rhs + (shift if shift.ndim == 3 else shift[:, None, :])
    if bordered:
        x = draw_rows(P, rhs, z, own, rho)
    else:
        x = overrelaxed_rows(cholesky_rows(P), rhs, z, own, rho)
    if sse and cross:
        # sum_k theta_k^2 - 2 sum_k r_k theta_k over the ratings, from this side's sums; the
        # quadratic forms x_i^T G_i x_i from the packed upper triangles in one fused pass (XLA
        # on CPU runs an einsum over the (C, m, K, K) matrices as many tiny matrix products)
        quad = _full_quadratic(G, x) if uses_gram_kernel(csr, K) else _packed_quadratic(Gp, x)
        part = part + quad - 2.0 * jnp.sum(x * r, axis=(1, 2))
    # a failed Cholesky factorisation gives NaN factors, hence NaN draws
    return x, bias_own, ~jnp.all(jnp.isfinite(x), axis=-1), part


def _full_quadratic(G, x):
    """``sum_i x_i^T G_i x_i`` per chain (C,) from the full (C, m, K, K) ``G_i`` (the
    compiled Gram kernel's, where packing them would be an extra pass): one fused multiply
    and reduction."""
    return jnp.sum(G * (x[..., :, None] * x[..., None, :]), axis=(1, 2, 3))


def _packed_quadratic(Gp, x):
    """``sum_i x_i^T G_i x_i`` per chain (C,) from the packed upper triangles ``Gp``
    (C, m, K(K+1)/2) of the symmetric ``G_i`` and the rows ``x`` (C, m, K)."""
    K = x.shape[-1]
    iu, ju = np.triu_indices(K)
    w = np.where(iu == ju, 1.0, 2.0).astype(np.dtype(x.dtype))  # off-diagonal entries appear twice
    return jnp.sum(Gp * pack_upper(outer(x)) * w, axis=(1, 2))


def row_sums(
    csr: CSR,
    other,
    bias_other,
    use_bias: bool,
    values=None,
    packed: bool = False,
    weights=None,
    unrated=None,
) -> RowSums:
    """The per-row sums over the ratings (:func:`_rating_sums`), and with ``unrated`` (the
    weight of every pair that is not a rating, observed as 0: an ``all_pairs``
    likelihood's) those over every pair of the row: the ratings' terms weigh ``w_k -
    unrated`` and ``unrated`` times the sum over all rows ``j`` of ``other`` is added to
    every row's (shared by the rows: ``sum_j F_j F_j^T`` (C, K, K), O(m_other K^2), and with
    biases ``sum_j F_j``, ``sum_j c_j F_j``, ``sum_j c_j`` and the count ``m_other``);
    the right-hand sides ``r`` and ``sumY`` keep ``w_k y_k`` (the unrated pairs' targets
    are 0).  Every block that reads the sums (the biases' and the rows' draws, the column
    moves, fused or not) then sees the full likelihood, and on every hot path
    (docs/algorithms.md, "One-class likelihood").

    Parameters
    ----------
    csr : CSR
        The ratings grouped by the rows being updated.
    other : jax.Array, shape (C, m_other, K)
        The other factor, all rows.
    bias_other : jax.Array, shape (C, m_other)
        The other side's biases.
    use_bias : bool
        Also the biases' sums.
    values : jax.Array, shape (C, n), optional
        Per-chain values that replace the ratings.
    packed : bool
        The packed Gram matrices are wanted.
    weights : jax.Array, shape (C, n) or (1, n), optional
        Per-rating weights.
    unrated : float, optional
        The unrated pairs' weight (None: the ratings alone); needs ``weights``.

    Returns
    -------
    RowSums
        The per-row sums.
    """
    if unrated is None:
        return _rating_sums(csr, other, bias_other, use_bias, values, packed, weights)
    if weights is None:
        raise ValueError("the unrated pairs' weight needs per-rating weights")
    C, m_other, K = other.shape
    rhs = weights * (csr.values[None] if values is None else values)
    dense = (
        jnp.concatenate([other, jnp.ones((C, m_other, 1), other.dtype)], -1) if use_bias else other
    )
    if rhs.shape[0] == 1:  # one view for every chain: one product, the chains stacked
        rall = _pattern_product(csr, rhs[0], dense)
    else:
        rall = jnp.stack([pattern_product(csr, rhs[c], dense[c]) for c in range(C)])
    gram_w = weights - unrated
    packed = packed or not uses_gram_kernel(csr, K)
    bw = jnp.stack([bias_other, jnp.ones_like(bias_other)], -1) if use_bias else None
    if gram_w.shape[0] == 1 and resolve_hot_path(csr.hot_path) != "gram":
        # the weights as the pattern's entries: one product for every chain
        G, Gp, S, Sw = pattern_gram(csr._replace(ones=gram_w[0]), other, bw, packed=packed)
    else:  # the compiled kernel takes per-chain weights
        gram_w = jnp.broadcast_to(gram_w, (C, gram_w.shape[-1]))
        G, Gp, S, Sw = pattern_gram(csr, other, bw, packed=packed, rating_weights=gram_w)
    shared = unrated * jnp.einsum("cjk,cjl->ckl", other, other)  # (C, K, K)
    if Gp is not None:
        Gp = Gp + pack_upper(shared)[:, None]
    G, r = G + shared[:, None], rall[..., :K]
    if not use_bias:
        return RowSums(Gp, G, r, None, None, None, None)
    # the biases' sums over every pair: the shared parts over all rows of ``other``
    sumO = S[..., 1, :] + unrated * jnp.sum(other, axis=1)[:, None]
    sumBO = S[..., 0, :] + unrated * jnp.einsum("cj,cjk->ck", bias_other, other)[:, None]
    sumB = Sw[..., 0] + unrated * jnp.sum(bias_other, axis=1)[:, None]
    count = Sw[..., 1] + unrated * m_other
    return RowSums(Gp, G, r, sumO, sumBO, sumB, rall[..., K], count)


def _rating_sums(
    csr: CSR,
    other,
    bias_other,
    use_bias: bool,
    values=None,
    packed: bool = False,
    weights=None,
) -> RowSums:
    """The per-row sums over the ratings that a half sweep and the column moves need (a
    :class:`RowSums`; ``other`` (C, m_other, K) the other factor, all rows):
    ``G_i = sum_j N_j N_j^T`` (C, m, K, K) with its packed upper triangles ``Gp``
    (C, m, K(K+1)/2), ``r_i = sum_j Y_ij N_j`` (C, m, K), and with biases ``sum_j N_j``,
    ``sum_j c_j N_j`` (C, m, K), ``sum_j c_j`` and ``sum_j Y_ij`` (C, m) (else None).
    ``values`` (C, n), when given, replace the ratings per chain (one product per chain);
    ``weights`` (C, n), when given, multiply every rating's terms and give ``count``
    (:func:`~bmczoo.linalg.pattern_gram`'s ``rating_weights``: the compiled kernel takes
    them; off its path one sparse product per chain whose pattern holds them).
    ``packed``: ``Gp`` is wanted (the fused column moves); on the compiled kernel's path
    it is None otherwise.

    Two sparse products with the rating pattern: one with the ratings, one with the packed
    outer products and the biases' columns; on the ``"gram"`` hot path the compiled kernel
    gives the Gram matrices and the biases' sums in one pass instead of the second
    (:func:`~bmczoo.linalg.pattern_gram`, weights ``[c_j, 1]``)."""
    C, m_other, K = other.shape
    vparts = [other] + ([jnp.ones((C, m_other, 1), other.dtype)] if use_bias else [])
    Rdense = jnp.concatenate(vparts, -1) if use_bias else vparts[0]
    if weights is not None:
        y = csr.values[None] if values is None else values
        values = weights * y
    if values is None:
        Rall = _pattern_product(csr, csr.values, Rdense)
    else:  # per-chain values (a latent z, weighted ratings): one product per chain
        Rall = jnp.stack([pattern_product(csr, values[i], Rdense[i]) for i in range(C)])
    r = Rall[..., :K]
    sumY = Rall[..., K] if use_bias else None
    if uses_gram_kernel(csr, K) or weights is not None:
        # the Gram matrices and the biases' sums in one pass (the compiled kernel's, or
        # with weights one sparse product per chain; then Gp always)
        w = jnp.stack([bias_other, jnp.ones_like(bias_other)], -1) if use_bias else None
        G, Gp, S, Sw = pattern_gram(
            csr,
            other,
            w,
            packed=packed or not uses_gram_kernel(csr, K),
            rating_weights=weights,
        )
        if not use_bias:
            return RowSums(Gp, G, r, None, None, None, None)
        count = None if weights is None else Sw[..., 1]
        return RowSums(Gp, G, r, S[..., 1, :], S[..., 0, :], Sw[..., 0], sumY, count)
    T = K * (K + 1) // 2
    parts = [pack_upper(outer(other))]
    if use_bias:
        parts += [other, bias_other[..., None] * other, bias_other[..., None]]
    Gall = _pattern_product(csr, csr.ones, jnp.concatenate(parts, -1) if use_bias else parts[0])
    Gp = Gall[..., :T]
    G = unpack_upper(Gp, K)
    if not use_bias:
        return RowSums(Gp, G, r, None, None, None, None)
    sumO, sumBO, sumB = Gall[..., T : T + K], Gall[..., T + K : T + 2 * K], Gall[..., T + 2 * K]
    return RowSums(Gp, G, r, sumO, sumBO, sumB, sumY)


#: the largest dense operand (bytes) of one CPU sparse product with the chains stacked as
#: its columns; above it, one product per chain, whose operand stays within the caches
#: where a stacked one would not
STACK_MAX_BYTES = 24 * 2**20


def _pattern_product(csr: CSR, data, dense):
    """``A @ dense`` per chain for the pattern ``A = (data, csr.index, csr.indptr)``:
    dense (C, m_other, W) -> (C, m, W), the chains stacked as columns of one product, or
    on the CPU one product per chain when the stacked operand is larger than
    :data:`STACK_MAX_BYTES` (the same values: each output column sums the same terms)."""
    C, m_other, W = dense.shape
    big = C * m_other * W * dense.dtype.itemsize > STACK_MAX_BYTES
    if C > 1 and big and resolve_hot_path(csr.hot_path) in ("bcsr", "gram"):
        return jnp.stack([pattern_product(csr, data, dense[c]) for c in range(C)])
    out = pattern_product(csr, data, jnp.transpose(dense, (1, 0, 2)).reshape(m_other, C * W))
    return jnp.transpose(out.reshape(csr.shape[0], C, W), (1, 0, 2))


def _sweep_body(
    rows: CSR,
    cols: CSR,
    x: FactorRows,
    z: FactorRows,
    cond: SweepConditional,
    comm: sh.Comm,
    flags: SweepFlags,
    factor_stats,
    values=(RatingsView(), RatingsView()),
    moves: tuple[FusedMoves, MoveArrays] | None = None,
) -> SweepResult:
    """Rows of M (and their biases), then rows of N (and theirs), on this device's rows.

    ``x`` the current rows, ``z`` their standard normals, ``cond`` the
    :class:`SweepConditional`;
    ``factor_stats`` the prior's statistics of the factors (one function, or one per side);
    ``values``: the likelihood's :class:`RatingsView` in row and in column order.
    ``moves = (FusedMoves, MoveArrays)`` runs each side's column moves between its sums
    and its draw; the rows' priors then come from the moved ``gamma`` (``cond.priors``
    unused).  Returns the :class:`SweepResult` (this device's rows)."""
    (pM, pN), tb, inv_var, (mb, mc) = cond
    N_all, c_all = comm.gather(x.N), comm.gather(x.c)
    xN = x.N
    side = Side(rows, x.M, N_all, x.b, c_all, *values[0])
    sums = None
    if moves is not None:
        # the column moves with M integrated and N rescaled, from the sums this half sweep
        # needs anyway; M is then drawn given the rescaled N, whose sums are exact linear
        # maps of these (transform_sums)
        moves, (gamma, draws, due) = moves
        sums = side_sums(side, flags.use_bias, packed=True)
        own, T, gamma, sums = moves.side(0, side, sums, gamma, tb, draws[0], comm.psum, due)
        side = side._replace(own=own)
        xN = _times(x.N, T)
        pM = moves.row_priors(gamma)[0]
    M, b, badM, part1 = half_sweep(
        side, z.M, z.b, Conditional(pM, tb, inv_var[:, 0], mb), flags, sums=sums
    )
    M, b = comm.mask(M, 0), comm.mask(b, 0)
    M_all, b_all = comm.gather(M), comm.gather(b)
    side = Side(cols, xN, M_all, x.c, b_all, *values[1])
    if moves is not None:  # the same with the roles swapped: N integrated, M rescaled
        sums = side_sums(side, flags.use_bias, packed=True)
        own, T, gamma, sums = moves.side(1, side, sums, gamma, tb, draws[1], comm.psum, due)
        side = side._replace(own=own)
        M = _times(M, T)
        pN = moves.row_priors(gamma)[1]
    N, c, badN, part2 = half_sweep(
        side, z.N, z.c, Conditional(pN, tb, inv_var[:, 1], mc), flags, cross=True, sums=sums
    )
    N, c = comm.mask(N, 1), comm.mask(c, 1)
    stats_M, stats_N = (
        factor_stats if isinstance(factor_stats, tuple) else (factor_stats, factor_stats)
    )
    stats = comm.psum(
        SweepStats(
            stats_M(M),
            stats_N(N),
            part1 + part2,
            jnp.stack([jnp.sum(b * b, axis=-1), jnp.sum(c * c, axis=-1)], axis=-1),
        )
    )
    return SweepResult(M, N, b, c, badM, badN, stats, None if moves is None else gamma)


def _times(F, T):
    """``F T`` for the factor rows ``F`` (C, m, K) and ``T`` of :func:`transform_sums`."""
    return F * T[:, None, :] if T.ndim == 2 else jnp.einsum("cjk,ckl->cjl", F, T)


class FusedMoves(NamedTuple):
    """Column moves inside the sweep (``fuse_column_moves``): ``side(which, side, sums,
    gamma, tb, draws, psum, due)`` runs one side's moves (``which`` 0: M integrated and
    N rescaled; 1: the roles swapped) from that half sweep's :class:`RowSums` and returns
    the new ``own``, the ``T`` of :func:`transform_sums`, ``gamma`` and the sums
    transformed by ``T``;
    ``row_priors(gamma)`` the rows' priors ``(pM, pN)`` at a moved ``gamma``."""

    side: Callable
    row_priors: Callable


def sweep_factors(
    problem: GibbsProblem,
    state: GibbsState,
    prior: Prior,
    z: FactorRows,
    tb,
    values=None,
    moves: tuple[FusedMoves, MoveArrays] | None = None,
) -> SweepResult:
    """The factor blocks of a sweep (:func:`_sweep_body`) on one device or sharded over the
    problem's mesh: ``z`` the standard normals of the rows (unpadded), ``tb`` (C,) the
    block precision, ``values`` the likelihood's :class:`RatingsView` in row and in column
    order (None: the ratings),
    ``moves = (FusedMoves, (gamma, draws, due))`` the column moves inside the sweep (the
    draws padded as the rows are on the problem's mesh; or None).  Returns ``(M, N, b, c,
    badM, badN, stats)``, and the moved ``gamma`` last with ``moves``.

    With feature links each device computes its rows' prior means and its part of the
    link's statistics from its block of the link's arrays (the parts are added with the
    other sums over rows)."""
    flags = SweepFlags(
        problem.options.overrelax,
        problem.biases is not None,
        problem.learned_tau,
        problem.options.row_draw == "bordered",
    )
    inv_var = 1.0 / state.bias_var
    bias_means = (None, None)
    if problem.bias_links:  # feature-driven biases: per-row prior means (one device)
        from ...offsets import bias_link

        bias_means = bias_link.prior_means(state.bias_link, problem.bias_links)
    x = FactorRows(state.M, state.N, state.row_bias, state.col_bias)
    if problem.mesh is not None:
        return _sharded_factors(problem, state, prior, (x, z), (tb, inv_var), flags, moves)
    priors, factor_stats = _row_prior(prior, state.prior_state, problem.links, problem.dims)
    vals = (RatingsView(), RatingsView()) if values is None else values
    return _sweep_body(
        problem.rows,
        problem.cols,
        x,
        z,
        SweepConditional(priors, tb, inv_var, bias_means),
        sh.LOCAL,
        flags,
        factor_stats,
        vals,
        moves,
    )


def _sharded_factors(problem, state, prior, rows_normals, precisions, flags, moves):
    """:func:`sweep_factors` over the problem's mesh: ``rows_normals = (x, z)`` the rows
    and their normals (unpadded), ``precisions = (tb, inv_var)``."""
    x, z = rows_normals
    tb, inv_var = precisions
    p1, p2 = padded_dims(problem)
    z = FactorRows(sh.pad_rows(z.M, p1), sh.pad_rows(z.N, p2), pad_vec(z.b, p1), pad_vec(z.c, p2))
    f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
    v = jax.sharding.PartitionSpec(None, sh.AXIS)
    comm = sh.sharded_comm(problem.dims)
    D = problem.mesh.devices.size
    blocks = (p1 // D, p2 // D)  # each device's rows of M and of N
    links = problem.links
    if links:  # the rows' priors are computed on each device from its block of the link
        from ...priors.macau.sharded import link_layout

        link_spec = sh.link_specs(links, link_layout(links))
        cond = SweepConditional(state.prior_state, tb, inv_var)
    else:
        link_spec = {}
        cond = SweepConditional(prior.row_priors(state.prior_state), tb, inv_var)
    spec, move_arrays = (None, None) if moves is None else moves
    move_spec = None
    if moves is not None:
        draw_spec = sh.move_draw_specs(move_arrays.draws[0])
        due_spec = None if move_arrays.due is None else r
        move_spec = MoveArrays(r, (draw_spec, draw_spec), due_spec)

    def body(rows, cols, x, z, cond, links, move_arrays):
        if links:
            local = sh.local_links(links)
            priors, factor_stats = _row_prior(prior, cond.priors, local, blocks)
            cond = cond._replace(priors=priors)
        else:
            factor_stats = prior.factor_stats
        local_csr = (sh.local_csr(rows), sh.local_csr(cols))
        moves = None if spec is None else (spec, move_arrays)
        return _sweep_body(*local_csr, x, z, cond, comm, flags, factor_stats, moves=moves)

    csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
    rows_spec = FactorRows(f, f, v, v)
    return jax.shard_map(
        body,
        mesh=problem.mesh,
        in_specs=(csr_spec, csr_spec, rows_spec, rows_spec, r, link_spec, move_spec),
        out_specs=SweepResult.specs(f, v, r, moves is not None),
        check_vma=False,
    )(problem.rows, problem.cols, x, z, cond, links, move_arrays)


def _row_prior(prior: Prior, prior_state: dict, links: dict, dims: tuple[int, int]):
    """The rows' priors and the prior's statistics of the factors (one function per side
    with links): with feature links, the per-row prior means and the link's statistics of
    the rows ``links`` holds (all, or this device's block in a sharded sweep)."""
    if not links:
        return prior.row_priors(prior_state), prior.factor_stats
    stats = tuple(
        functools.partial(prior.link_factor_stats, links=links, side=s) for s in ("M", "N")
    )
    return prior.link_row_priors(prior_state, links, *dims), stats
