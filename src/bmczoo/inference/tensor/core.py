"""The Gibbs sweep of the CP model of an N-way array (docs/algorithms.md, "Tensors").

``theta[i_1..i_D] = sum_h prod_d U_d[i_d, h]`` (plus ``sum_d b_d[i_d]`` with biases per
mode), ``U_d[:, h] ~ N(0, gamma_h I)`` with the column scales ``gamma_h`` shared by all
modes, so every column-scale prior of the paper carries over with ``S_h = sum_d
||U_d[:, h]||^2`` and ``d = sum_d m_d`` (:meth:`~bmczoo.priors.Prior.sample_conditional`).

Given the other modes, the rows of ``U_d`` are independent Gaussian regressions whose
design rows are ``w_k = prod_{d' != d} U_d'[i_d'k]`` (elementwise), one per observed
entry: the mode's pattern is a CSR of its rows over the *entries* (``index`` the entries'
positions), and ``w`` (C, n, K) plays the other factor of the matrix sweep, so the row
block is the matrix's (:func:`bmczoo.linalg.pattern_gram` on every hot path, the compiled
Gram kernel included; :func:`bmczoo.linalg.draw_rows`).  Nothing of size ``prod m_d`` is
formed.  Pure functions over a :class:`TensorState` (leading chain axis ``C``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import _rng
from ...data import TensorData
from ...linalg import (
    CSR,
    device_array,
    draw_rows,
    pattern_gram,
    pattern_product,
    prior_precision_term,
    resolve_hot_path,
    row_ids_from_indptr,
)

__all__ = [
    "TensorProblem",
    "TensorState",
    "build_problem",
    "column_moves",
    "design",
    "init",
    "mode_conditional",
    "spike_slab_swaps",
    "sweep",
    "theta_at",
]


class TensorProblem(NamedTuple):
    """The device arrays of a problem.

    Parameters
    ----------
    modes : tuple of bmczoo.linalg.CSR
        One pattern per mode: its ``m_d`` rows over the ``n`` entries (``index`` the
        entries' positions, ``values`` their values in the mode's order).
    index : jax.Array
        (n, D) int32 indices of the entries.
    values : jax.Array
        (n,) their values, in the entries' order.
    tau : jax.Array
        The likelihood precision (the start of a learned one).
    """

    modes: tuple
    index: jax.Array
    values: jax.Array
    tau: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c.shape[0] for c in self.modes)


class TensorState(NamedTuple):
    """The state of ``C`` chains.

    Parameters
    ----------
    U : tuple of jax.Array
        One (C, m_d, K) factor per mode.
    gamma : jax.Array
        (C, K) the column scales (unused with Normal-Wishart rows).
    tau : jax.Array
        (C,) the noise precision.
    bias : tuple of jax.Array
        One (C, m_d) bias vector per mode (empty without biases).
    bias_var : jax.Array
        (C, D) the biases' variances.
    key : jax.Array
        (C,) the chains' keys.
    rows : tuple
        With Normal-Wishart rows each mode's ``(mu (C, K), Lambda (C, K, K))``; empty for
        a column-scale prior.
    """

    U: tuple
    gamma: jax.Array
    tau: jax.Array
    bias: tuple
    bias_var: jax.Array
    key: jax.Array
    rows: tuple = ()


def build_problem(data: TensorData, tau: float, dtype=jnp.float32) -> TensorProblem:
    """The device arrays of ``data`` (once; every sweep reuses them).

    Parameters
    ----------
    data : TensorData
        The values the model fits (centred by the caller).
    tau : float
        The likelihood precision (the start of a learned one).
    dtype : dtype
        The float dtype of the run.
    """
    modes = []
    n = data.n
    for d, view in enumerate(data.views):
        index = device_array(np.asarray(view.index), jnp.int32)
        values = device_array(view.values, dtype)
        modes.append(
            CSR(
                indptr=device_array(view.indptr, jnp.int32),
                index=index,
                values=values,
                ones=device_array(np.ones(n), dtype),
                shape=(data.shape[d], n),
                row_ids=device_array(row_ids_from_indptr(view.indptr)),
                hot_path=resolve_hot_path(None),
            )
        )
    return TensorProblem(
        modes=tuple(modes),
        index=device_array(data.indices, jnp.int32),
        values=device_array(data.values, dtype),
        tau=device_array(tau, dtype),
    )


def init(
    keys: jax.Array,
    problem: TensorProblem,
    prior,
    K: int,
    *,
    biases=None,
    scale: float = 0.1,
) -> TensorState:
    """Chains started at small random factors (``N(0, scale^2)``), ``gamma`` at the
    prior's ``init_gamma`` (Normal-Wishart rows: ``mu = 0``, ``Lambda = I``), ``tau`` at
    the problem's, zero biases with unit variances.

    Parameters
    ----------
    keys : jax.Array, shape (C,)
        One key per chain.
    problem : TensorProblem
        The problem.
    prior : bmczoo.priors.Prior
        A column-scale prior or Normal-Wishart rows.
    K : int
        The number of columns.
    biases : bmczoo.offsets.Biases, optional
        Biases per mode.
    scale : float
        The factors' starting scale.
    """
    dtype = problem.values.dtype
    shape = problem.shape
    C = keys.shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, len(shape) + 1))(keys)
    U = tuple(
        scale * jax.vmap(lambda k, m=m: _rng.normal(k, (m, K), dtype))(split[:, d])
        for d, m in enumerate(shape)
    )
    g0 = prior.init_gamma(K, sum(shape), dtype) if prior.has_column_scales else jnp.ones(K)
    gamma = jnp.broadcast_to(jnp.asarray(g0, dtype), (C, K))
    bias = () if biases is None else tuple(jnp.zeros((C, m), dtype) for m in shape)
    rows = ()
    if not prior.has_column_scales:  # Normal-Wishart rows: mu = 0, Lambda = I per mode
        eye = jnp.broadcast_to(jnp.eye(K, dtype=dtype), (C, K, K))
        rows = tuple((jnp.zeros((C, K), dtype), eye) for _ in shape)
    return TensorState(
        U=U,
        gamma=jnp.asarray(gamma, dtype),
        tau=jnp.full((C,), problem.tau, dtype),
        bias=bias,
        bias_var=jnp.ones((C, len(shape)), dtype),
        key=split[:, -1],
        rows=rows,
    )


def design(U: tuple, index: jax.Array, d: int) -> jax.Array:
    """``w_k = prod_{d' != d} U_d'[i_d'k]`` (C, n, K) at every entry."""
    out = None
    for e, F in enumerate(U):
        if e != d:
            rows = F[:, index[:, e]]
            out = rows if out is None else out * rows
    return out


def theta_at(U: tuple, bias: tuple, index: jax.Array) -> jax.Array:
    """``theta`` (C, P) at the entries ``index``: the CP term plus the biases.

    Parameters
    ----------
    U : tuple of jax.Array
        The factors (C, m_d, K).
    bias : tuple of jax.Array
        The biases (C, m_d) (empty: none).
    index : jax.Array, shape (P, D)
        The entries.
    """
    # the last mode's rows enter a dot product: XLA's CPU reduction over a short minor
    # axis (jnp.sum(..., axis=-1)) is several times slower than the contraction
    last = len(U) - 1
    t = jnp.einsum("cpk,cpk->cp", design(U, index, last), U[last][:, index[:, last]])
    for e, b in enumerate(bias):
        t = t + b[:, index[:, e]]
    return t


def _bias_sum(bias: tuple, index: jax.Array, skip: int = -1):
    """``sum_{d != skip} b_d[i_dk]`` (C, n), or 0 without biases."""
    out = 0.0
    for e, b in enumerate(bias):
        if e != skip:
            out = out + b[:, index[:, e]]
    return out


def mode_conditional(problem: TensorProblem, U: tuple, d: int, target, t, row_prec, shift=None):
    """The conditional of the rows of ``U_d`` given the other modes: precisions ``P``
    (C, m_d, K, K) and right-hand sides (C, m_d, K) (the means are ``P^-1 rhs``).

    Parameters
    ----------
    problem : TensorProblem
        The problem.
    U : tuple of jax.Array
        The factors (C, m_e, K) (``U[d]`` is not read).
    d : int
        The mode.
    target : jax.Array or float
        The values the CP term fits (C, n) in the entries' order (the data minus the
        biases), or 0.0: the data.
    t : jax.Array, shape (C,)
        The block precision.
    row_prec : jax.Array, shape (C, K) or (C, K, K)
        The rows' prior precision (diagonal, or full: Normal-Wishart's ``Lambda``).
    shift : jax.Array, shape (C, K), optional
        The prior-mean term ``Lambda mu`` (Normal-Wishart), added to every row's
        right-hand side.
    """
    csr = problem.modes[d]
    K = U[0].shape[-1]
    # the design is formed in the mode's order (csr.index: the entries' positions), so the
    # Gram pass reads it sequentially: a gather of the n x K design at random positions
    # costs more than the pass itself once it outgrows the cache
    order = csr.index
    w = design(U, problem.index[order], d)
    # the Gram matrices and the targets' sums sum_k y_k w_k in one pass over the entries:
    # the targets are the weights of the design's rows (pattern_gram's S)
    y = csr.values[None] if jnp.ndim(target) == 0 else target[:, order]
    in_order = csr._replace(index=jnp.arange(order.shape[0], dtype=order.dtype))
    sums = pattern_gram(in_order, w, jnp.broadcast_to(y, w.shape[:2])[..., None])
    G, rhs = sums.G, t[:, None, None] * sums.S[:, :, 0, :]
    P = t[:, None, None, None] * G + prior_precision_term(row_prec, K, G.dtype)
    return P, rhs if shift is None else rhs + shift[:, None, :]


def _mode_block(key, problem: TensorProblem, U: tuple, d: int, target, t, row_prior):
    """A draw of ``U_d`` from :func:`mode_conditional` (``row_prior``: the rows' prior
    precision and shift), and the data's part of the squared error at it when ``target``
    is the data: ``sum_k (u^T w_k)^2 - 2 y_k u^T w_k`` from the conditional's sums
    (O(m K^2), no pass over the entries)."""
    row_prec, shift = row_prior
    P, rhs = mode_conditional(problem, U, d, target, t, row_prec, shift)
    z = jax.vmap(lambda k: _rng.normal(k, rhs.shape[1:], rhs.dtype))(key)
    x = draw_rows(P, rhs, z)
    if row_prec.ndim == 3:  # a full prior precision
        prior_quad = jnp.einsum("cik,ckl,cil->c", x, row_prec, x)
    else:
        prior_quad = jnp.einsum("cik,cik->c", x * x, jnp.broadcast_to(row_prec[:, None], x.shape))
    lin = rhs if shift is None else rhs - shift[:, None, :]
    quad = jnp.einsum("cik,cikl,cil->c", x, P, x) - prior_quad
    part = (quad - 2.0 * jnp.einsum("cik,cik->c", x, lin)) / t
    return x, part


def _row_priors(state: TensorState, prior, D: int) -> tuple:
    """Each mode's ``(prior precision, shift)``: ``(1/gamma, None)`` for the column-scale
    priors, ``(Lambda_d, Lambda_d mu_d)`` for Normal-Wishart rows."""
    if state.rows:
        return tuple((Lam, jnp.einsum("ckl,cl->ck", Lam, mu)) for mu, Lam in state.rows)
    p = jax.vmap(prior.row_prior)(state.gamma)
    return tuple((p, None) for _ in range(D))


def _normal_wishart_rows(keys, U: tuple, prior) -> tuple:
    """Each mode's ``(mu_d, Lambda_d)`` from its Normal-Wishart conditional given the
    mode's rows (``keys`` (C, D))."""
    from ...priors._wishart import nw_posterior, wishart_draw

    K = U[0].shape[-1]
    nu0, W0_inv = prior.degrees(K), jnp.eye(K, dtype=U[0].dtype) / prior.W0_scale
    out = []
    for d, F in enumerate(U):

        def one(k, F):
            mu, beta, nu, Winv = nw_posterior(
                jnp.sum(F, 0), F.T @ F, F.shape[0], prior.beta0, nu0, W0_inv
            )
            return wishart_draw(k, Winv, nu, beta, mu)

        out.append(jax.vmap(one)(keys[:, d], F))
    return tuple(out)


def _bias_block(key, problem: TensorProblem, state_bias: tuple, var, d: int, resid, t):
    """A draw of ``b_d`` given the rest: ``resid`` (C, n) the data minus the CP term and
    the other modes' biases; ``var`` (C,) the bias variance ``s_d^2``."""
    csr = problem.modes[d]
    m = csr.shape[0]
    # the residuals' sums and the counts of each row in one sparse product (the hot path)
    both = pattern_product(csr, csr.ones, jnp.concatenate([resid, jnp.ones_like(resid[:1])]).T)
    sums, counts = both[:, :-1].T, both[:, -1]  # (C, m), (m,)
    prec = t[:, None] * counts[None] + 1.0 / var[:, None]
    z = jax.vmap(lambda k: _rng.normal(k, (m,), resid.dtype))(key)
    return t[:, None] * sums / prec + z / jnp.sqrt(prec)


def _log_marginal(gamma, p, b):
    """``sum_i (-log(gamma p_i) + b_i^2 / p_i) / 2`` (C,): the log likelihood of a column
    of mode ``d`` integrated out, up to what does not depend on ``gamma`` and ``w``."""
    return 0.5 * jnp.sum(-jnp.log(gamma[:, None] * p) + b * b / p, axis=1)


def _design_scale(log_s, D: int):
    """The factor of the design ``w`` when the other ``D - 1`` modes' columns are
    multiplied by ``s``: ``s^(D-1)``."""
    return jnp.exp((D - 1) * log_s)


def column_moves(key, state: TensorState, problem: TensorProblem, prior, likelihood, d: int):
    """The column moves with mode ``d``'s column integrated out (docs/algorithms.md,
    "Tensors"), column after column: ``gamma_h'`` from the prior's
    :meth:`~bmczoo.priors.Prior.column_proposal` with the other modes' columns ``h``
    rescaled by ``s = sqrt(gamma_h' / gamma_h)`` (their prior and Jacobian cancel), accepted
    by Metropolis-Hastings on the marginal of ``U_d[:, h]``, then ``U_d[:, h]`` drawn from
    its univariate conditionals.  ``key`` (C,) one key per chain."""
    D, C, K = len(state.U), state.gamma.shape[0], state.gamma.shape[1]
    idx, m, csr = problem.index, problem.shape[d], problem.modes[d]
    dt = state.gamma.dtype
    keys = jax.vmap(lambda k: jax.random.split(k, 3))(key)
    z = jax.vmap(lambda k: _rng.normal(k, (K,), dt))(keys[:, 0])
    u = jax.vmap(lambda k: _rng.uniform(k, (K,), dt))(keys[:, 1])
    zz = jax.vmap(lambda k: _rng.normal(k, (m, K), dt))(keys[:, 2])
    t = likelihood.block_precision(state.tau)[:, None]
    resid = problem.values[None] - theta_at(state.U, state.bias, idx)
    total = sum(problem.shape)

    def one(h, carry):
        U, gamma, resid = carry
        w = None
        for e in range(D):
            if e != d:
                col = U[e][:, :, h][:, idx[:, e]]
                w = col if w is None else w * col
        ud = U[d][:, :, h]
        r = resid + ud[:, idx[:, d]] * w  # without column h
        g = gamma[:, h]
        g2, log_s, log_ratio = prior.column_proposal(g, z[:, h], total)
        # both per-row sums in one sparse product over the mode's pattern (the hot path)
        sums = pattern_product(csr, csr.ones, jnp.concatenate([w * w, r * w]).T)
        ww, rw = sums[:, :C].T, sums[:, C:].T  # (C, m)
        scale = _design_scale(log_s, D)[:, None]
        p0, b0 = 1.0 / g[:, None] + t * ww, t * rw
        p1, b1 = 1.0 / g2[:, None] + t * scale**2 * ww, t * scale * rw
        log_a = log_ratio + _log_marginal(g2, p1, b1) - _log_marginal(g, p0, b0)
        ok = jnp.log(u[:, h]) < log_a
        s = jnp.where(ok, jnp.exp(log_s), 1.0)
        p, b = jnp.where(ok[:, None], p1, p0), jnp.where(ok[:, None], b1, b0)
        new_u = b / p + zz[:, :, h] / jnp.sqrt(p)
        U = tuple(
            F.at[:, :, h].set(new_u if e == d else F[:, :, h] * s[:, None]) for e, F in enumerate(U)
        )
        w = w * jnp.where(ok, _design_scale(log_s, D), 1.0)[:, None]
        resid = r - new_u[:, idx[:, d]] * w
        return U, gamma.at[:, h].set(jnp.where(ok, g2, g)), resid

    U, gamma, _ = jax.lax.fori_loop(0, K, one, (state.U, state.gamma, resid))
    return state._replace(U=U, gamma=gamma)


#: power iterations of the swaps' data-driven direction, and the proposal's spread (a
#: fraction of the slab's sd) around it
_POWER_STEPS, _SWAP_SPREAD = 2, 0.3


def _rank_one_direction(r, problem: TensorProblem):
    """Unit vectors ``v_e`` (C, m_e) of every mode from a few alternating (power)
    iterations of the rank-one fit to the residuals ``r`` (C, n) at the entries (the
    unobserved entries read as 0): a deterministic function of ``r``."""
    idx = problem.index
    v = [jnp.ones((r.shape[0], m), r.dtype) / jnp.sqrt(m) for m in problem.shape]
    for _ in range(_POWER_STEPS):
        for e, csr in enumerate(problem.modes):
            x = r
            for f in range(len(v)):
                if f != e:
                    x = x * v[f][:, idx[:, f]]
            s = pattern_product(csr, csr.ones, x.T).T  # (C, m_e)
            v[e] = s / jnp.maximum(jnp.linalg.norm(s, axis=1, keepdims=True), 1e-30)
    return v


def _log_normal(x, mean, var):
    """``sum log N(x | mean, var)`` over the last axis (C,) (``var`` a scalar)."""
    m = x.shape[-1]
    return -0.5 * (m * jnp.log(2 * jnp.pi * var) + jnp.sum((x - mean) ** 2, axis=-1) / var)


def _swap_proposal(cols: dict, z: dict, on, v, shape, scales):
    """The swaps' proposed columns of the re-drawn modes (the keys of ``z``, standard
    normals (C, m_e) each) and the log ratio of proposal and prior densities (C,).

    The spike's proposal is its prior ``N(0, eps)``, whose density cancels the spike's
    prior in both directions; what is left, per re-drawn mode: turning off, ``log q_on(V) -
    log N(V | 0, C)``; turning on, ``log N(V' | 0, C) - log q_on(V')``."""
    eps, slab, sd_on = scales
    new, log_q = {}, 0.0
    for e, ze in z.items():
        mu = v[e] * jnp.sqrt(shape[e] * slab)
        new[e] = jnp.where(on[:, None], jnp.sqrt(eps) * ze, mu + sd_on * ze)
        off_term = _log_normal(cols[e], mu, sd_on**2) - _log_normal(cols[e], 0.0, slab)
        on_term = _log_normal(new[e], 0.0, slab) - _log_normal(new[e], mu, sd_on**2)
        log_q = log_q + jnp.where(on, off_term, on_term)
    return new, log_q


def spike_slab_swaps(key, state: TensorState, problem: TensorProblem, prior, likelihood, d: int):
    """The spike/slab swaps of a two-point prior with mode ``d``'s column integrated out
    (docs/algorithms.md, "Tensors"), column after column: ``gamma_h`` flips and the other
    modes' columns ``V`` are re-drawn: from the spike's prior ``N(0, eps)`` when the column
    turns off, from ``N(mu, (spread^2) C)`` around a rank-one direction of the residuals
    without column ``h`` (scaled to the slab's norm) when it turns on; Metropolis-Hastings
    with the proposal densities on the marginal of ``U_d[:, h]``, then ``U_d[:, h]`` drawn.
    The residuals without the column do not depend on it, so the proposal is the same
    function of the state in both directions.  ``key`` (C,) one key per chain."""
    eps, slab = prior.two_point_scales()
    D, C, K = len(state.U), state.gamma.shape[0], state.gamma.shape[1]
    idx, m, csr = problem.index, problem.shape[d], problem.modes[d]
    dt = state.gamma.dtype
    keys = jax.vmap(lambda k: jax.random.split(k, 3 + D))(key)
    u = jax.vmap(lambda k: _rng.uniform(k, (K,), dt))(keys[:, 0])
    zz = jax.vmap(lambda k: _rng.normal(k, (m, K), dt))(keys[:, 1])
    zv = [
        jax.vmap(lambda k, mm=mm: _rng.normal(k, (mm, K), dt))(keys[:, 2 + e])
        for e, mm in enumerate(problem.shape)
    ]
    t = likelihood.block_precision(state.tau)[:, None]
    resid = problem.values[None] - theta_at(state.U, state.bias, idx)
    total = sum(problem.shape)
    others = [e for e in range(D) if e != d]

    def one(h, carry):
        U, gamma, resid = carry
        cols = {e: U[e][:, :, h] for e in range(D)}
        w = None
        for e in others:
            w = cols[e][:, idx[:, e]] if w is None else w * cols[e][:, idx[:, e]]
        r = resid + cols[d][:, idx[:, d]] * w  # without column h
        g = gamma[:, h]
        on = g > jnp.sqrt(eps * slab)
        g2, _, log_prior = prior.column_proposal(g, jnp.zeros_like(g), total)
        v = _rank_one_direction(r, problem)
        sd_on = _SWAP_SPREAD * jnp.sqrt(slab)
        z = {e: zv[e][:, :, h] for e in others}
        new, log_q = _swap_proposal(cols, z, on, v, problem.shape, (eps, slab, sd_on))
        w2 = None
        for e in others:
            w2 = new[e][:, idx[:, e]] if w2 is None else w2 * new[e][:, idx[:, e]]
        sums = pattern_product(csr, csr.ones, jnp.concatenate([w * w, r * w, w2 * w2, r * w2]).T)
        ww, rw, ww2, rw2 = (sums[:, i * C : (i + 1) * C].T for i in range(4))
        p0, b0 = 1.0 / g[:, None] + t * ww, t * rw
        p1, b1 = 1.0 / g2[:, None] + t * ww2, t * rw2
        log_a = log_prior + log_q + _log_marginal(g2, p1, b1) - _log_marginal(g, p0, b0)
        ok = jnp.log(u[:, h]) < log_a
        p, b = jnp.where(ok[:, None], p1, p0), jnp.where(ok[:, None], b1, b0)
        new_u = b / p + zz[:, :, h] / jnp.sqrt(p)
        out = []
        for e, F in enumerate(U):
            col = new_u if e == d else jnp.where(ok[:, None], new[e], cols[e])
            out.append(F.at[:, :, h].set(col))
        w = jnp.where(ok[:, None], w2, w)
        resid = r - new_u[:, idx[:, d]] * w
        return tuple(out), gamma.at[:, h].set(jnp.where(ok, g2, g)), resid

    U, gamma, _ = jax.lax.fori_loop(0, K, one, (state.U, state.gamma, resid))
    return state._replace(U=U, gamma=gamma)


def _bias_variances(key, bias: list, biases, shape) -> jax.Array:
    """Each mode's bias variance (C, D) from its inverse-gamma conditional."""
    D = len(shape)
    sumsq = jnp.stack([jnp.sum(b * b, axis=1) for b in bias], axis=1)  # (C, D)
    kv = jax.vmap(lambda k: jax.random.split(k, D))(key)
    return jnp.stack(
        [
            jax.vmap(lambda k, q, m=m: biases.sample_variance(k, q, m))(kv[:, d], sumsq[:, d])
            for d, m in enumerate(shape)
        ],
        axis=1,
    )


def sweep(
    state: TensorState,
    problem: TensorProblem,
    prior,
    likelihood,
    biases=None,
    moves: bool = False,
):
    """One Gibbs sweep: each mode's factor given the others, each mode's biases, the
    column scales (or each mode's Normal-Wishart mean and precision), the bias variances
    and a learned ``tau``; with ``moves`` (a prior with a column proposal) then the column
    moves with each mode's column integrated out in turn.

    Parameters
    ----------
    state : TensorState
        The chains' state.
    problem : TensorProblem
        The problem.
    prior : bmczoo.priors.Prior
        A column-scale prior or Normal-Wishart rows.
    likelihood : bmczoo.likelihoods.Likelihood
        ``Tempered`` or ``LearnedNoise``.
    biases : bmczoo.offsets.Biases, optional
        Biases per mode (with ``state.bias``).
    moves : bool
        Run the column moves after the blocks.
    """
    D = len(state.U)
    keys = jax.vmap(lambda k: jax.random.split(k, 3 * D + 4))(state.key)
    y = problem.values[None]
    t = likelihood.block_precision(state.tau)
    row_priors = _row_priors(state, prior, D)
    U, bias = list(state.U), list(state.bias)
    for d in range(D):
        target = y - _bias_sum(tuple(bias), problem.index) if bias else 0.0
        U[d], part = _mode_block(keys[:, d], problem, tuple(U), d, target, t, row_priors[d])
    if bias:
        cp = theta_at(tuple(U), (), problem.index)
        for d in range(D):
            resid = y - cp - _bias_sum(tuple(bias), problem.index, skip=d)
            bias[d] = _bias_block(
                keys[:, D + d], problem, tuple(bias), state.bias_var[:, d], d, resid, t
            )
    gamma, rows = state.gamma, state.rows
    if rows:
        kr = jax.vmap(lambda k: jax.random.split(k, D))(keys[:, 2 * D])
        rows = _normal_wishart_rows(kr, tuple(U), prior)
    else:
        S = sum(jnp.sum(F * F, axis=1) for F in U)
        gamma = jax.vmap(lambda k, s: prior.sample_conditional(k, s, sum(problem.shape)))(
            keys[:, 2 * D], S
        )
    bias_var = (
        _bias_variances(keys[:, 2 * D + 1], bias, biases, problem.shape) if bias else state.bias_var
    )
    tau = state.tau
    if likelihood.learned:
        if bias:  # the CP term of the biases' block and the new biases
            resid = y - cp - _bias_sum(tuple(bias), problem.index)
            sse = jnp.sum(resid * resid, axis=1)
        else:  # the last mode's sums: sum_k y_k^2 + (u^T w_k)^2 - 2 y_k u^T w_k
            sse = jnp.maximum(jnp.sum(problem.values * problem.values) + part, 0.0)
        tau = jax.vmap(lambda k, s: likelihood.sample_tau(k, s, problem.values.shape[0]))(
            keys[:, 2 * D + 2], sse
        )
    new = TensorState(tuple(U), gamma, tau, tuple(bias), bias_var, keys[:, 2 * D + 3], rows)
    if moves:
        swaps = prior.two_point_scales() is not None
        for d in range(D):
            k = jax.vmap(jax.random.split)(keys[:, 2 * D + 4 + d])
            new = column_moves(k[:, 0], new, problem, prior, likelihood, d)
            # a column can also turn on from the spike: the swaps (a power iteration per
            # column) with the first mode integrated out only, for their cost
            if swaps and d == 0:
                new = spike_slab_swaps(k[:, 1], new, problem, prior, likelihood, d)
    return new
