"""Mean-field VB (CAVI) for the CP model of an N-way array (docs/algorithms.md, "Tensors",
"Mean-field VB of the CP model").

``q = prod_d prod_i N(U_d[i] | m_d[i], S_d[i]) prod_h q(gamma_h) [q(tau)]``.  Under the
mean-field q the modes are independent, so at an entry ``e`` the design row of mode ``d``,
``w_e = prod_{d' != d} U_d'[i_d'e]`` (elementwise), has the moments

    E[w_e]       = prod_{d' != d} m_d'[i_d'e]                       (K,)
    E[w_e w_e^T] = prod_{d' != d} (S_d'[i_d'e] + m_d'[i_d'e] m_d'[i_d'e]^T)   (K, K)

(elementwise products), and the optimal q of row ``i`` of mode ``d`` is the matrix VB's
with these in place of the other factor's moments: precision ``diag(E[1/gamma]) + t
sum_{e: i_de = i} E[w_e w_e^T]``, mean ``P^-1 t sum_e y_e E[w_e]`` (``t``: the block
precision, ``temper E[tau]`` for a learned noise).  The moments are formed per entry, in
chunks of :data:`CHUNK` entries (each (C, chunk, K, K)), and summed by the mode's rows (its
pattern's sorted row ids); nothing of size ``prod m_d`` is built.  The column scales'
``q(gamma)`` are the prior's VB hooks
(:meth:`~bmczoo.priors.Prior.vb_step`, ``vb_elbo_term``) with ``E[S_h] = sum_d sum_i
E[U_d[i, h]^2]`` and ``sum_d m_d`` rows; ``q(tau)`` the likelihood's (``vb_step``).

Pure functions over a :class:`TensorVBState` (leading run axis ``C``): :func:`init`,
:func:`update` (one CAVI iteration), :func:`elbo`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ... import _rng
from ...linalg import cholesky_rows, outer, prior_precision_term, solve_rows
from .core import TensorProblem

__all__ = [
    "TensorVBState",
    "check_model",
    "elbo",
    "expected_sq_error",
    "init",
    "factor_stats",
    "mode_moments",
    "update",
    "update_mode",
]

_LOG_2PI = math.log(2.0 * math.pi)

#: entries per chunk of the per-entry (C, chunk, K, K) moments
CHUNK = 8192


class TensorVBState(NamedTuple):
    """Variational parameters of ``C`` independent runs.

    Parameters
    ----------
    mean : tuple of jax.Array
        One (C, m_d, K) array of the rows' means per mode.
    cov : tuple of jax.Array
        One (C, m_d, K, K) array of the rows' covariances per mode.
    inv_gamma : jax.Array
        (C, K) ``E_q[1/gamma_h]`` of the column scales.
    noise : dict
        ``q(tau)`` of a learned likelihood (``shape``, ``rate``; empty for a fixed ``tau``).
    """

    mean: tuple
    cov: tuple
    inv_gamma: jax.Array
    noise: dict = {}


def check_model(prior, likelihood, biases) -> None:
    """A clear error for what the tensor VB does not implement: priors without column
    scales (Normal-Wishart rows), biases, and likelihoods other than the Gaussian ones.

    Parameters
    ----------
    prior : bmczoo.priors.Prior
        The prior.
    likelihood : bmczoo.likelihoods.Likelihood or None
        The likelihood (None: the default tempered Gaussian).
    biases : bmczoo.offsets.Biases or None
        The biases component.
    """
    if not prior.has_column_scales:
        raise ValueError(
            f"method='vb' on a TensorData takes a column-scale prior (fixed, inverse-gamma, "
            f"gamma, discrete), not {prior.name}: use method='gibbs' for Normal-Wishart rows"
        )
    if biases is not None:
        raise ValueError(
            "biases= is not implemented for method='vb' on a TensorData (use method='gibbs')"
        )
    if likelihood is not None and (
        likelihood.latent or likelihood.weighted or likelihood.all_pairs
    ):
        raise ValueError(
            f"method='vb' on a TensorData takes a Gaussian likelihood (Tempered, "
            f"LearnedNoise), not {likelihood.name}"
        )


def init(
    keys: jax.Array,
    problem: TensorProblem,
    prior,
    K: int,
    *,
    likelihood=None,
    scale: float = 1.0,
    gamma: float | None = 1.0,
) -> TensorVBState:
    """Random means ``N(0, scale^2)`` (one key per run), zero covariances, the prior's
    starting ``q(gamma)`` (:meth:`~bmczoo.priors.Prior.vb_state`: ``E[1/gamma_h] =
    1/gamma``; ``gamma=None``: the prior's ``init_gamma``) and a learned likelihood's
    ``q(tau)`` at its prior.  The first update of mode 0 reads only the other modes.

    Parameters
    ----------
    keys : jax.Array, shape (C,)
        One key per run.
    problem : TensorProblem
        The problem (:func:`bmczoo.inference.tensor.core.build_problem`).
    prior : bmczoo.priors.Prior
        A column-scale prior.
    K : int
        The number of columns.
    likelihood : bmczoo.likelihoods.Likelihood, optional
        The likelihood (a learned one adds ``q(tau)``).
    scale : float
        The starting means' scale.
    gamma : float or None
        The starting ``E[1/gamma_h] = 1/gamma``.
    """
    check_model(prior, likelihood, None)
    dtype = problem.values.dtype
    shape = problem.shape
    C = keys.shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, len(shape)))(keys)
    mean = tuple(
        scale * jax.vmap(lambda k, m=m: _rng.normal(k, (m, K), dtype))(split[:, d])
        for d, m in enumerate(shape)
    )
    cov = tuple(jnp.zeros((C, m, K, K), dtype) for m in shape)
    q = prior.vb_state(K, sum(shape), 0, C, dtype, gamma)
    learned = likelihood is not None and likelihood.learned
    noise = likelihood.vb_state(C, dtype) if learned else {}
    return TensorVBState(mean=mean, cov=cov, inv_gamma=q["inv_gamma"], noise=noise)


def _entry_moments(state: TensorVBState, index: jax.Array, skip: int | None):
    """``(E[w_e] (C, n, K), E[w_e w_e^T] (C, n, K, K))`` at the entries ``index`` (n, D):
    the elementwise products over the modes other than ``skip`` (None: every mode, the
    moments of the CP term's summands)."""
    Ew, Eww = None, None
    for d, (m, S) in enumerate(zip(state.mean, state.cov)):
        if d == skip:
            continue
        md, Sd = m[:, index[:, d]], S[:, index[:, d]]
        second = Sd + outer(md)
        Ew = md if Ew is None else Ew * md
        Eww = second if Eww is None else Eww * second
    return Ew, Eww


def _row_sums(x: jax.Array, row_ids: jax.Array, m: int) -> jax.Array:
    """Sums of ``x`` (C, n, ...) over the entries of each row (sorted ``row_ids`` (n,))."""
    return jax.vmap(
        lambda v: jax.ops.segment_sum(v, row_ids, num_segments=m, indices_are_sorted=True)
    )(x)


def _chunks(n: int, chunk: int):
    """Positions (B, chunk') of ``n`` entries in chunks (the last padded with the last
    entry) and their validity mask."""
    size = max(1, min(int(chunk), n))
    pos = jnp.arange(-(-n // size) * size)
    return jnp.minimum(pos, n - 1).reshape(-1, size), (pos < n).reshape(-1, size)


def mode_moments(state: TensorVBState, problem: TensorProblem, d: int, chunk: int = CHUNK):
    """``(G, r)``: ``G_i = sum_{e: i_de = i} E[w_e w_e^T]`` (C, m_d, K, K) and ``r_i =
    sum_e y_e E[w_e]`` (C, m_d, K), the expected design moments of mode ``d``'s rows, over
    chunks of ``chunk`` entries in the mode's order (each chunk's (C, chunk, K, K)
    moments summed by rows and accumulated).

    Parameters
    ----------
    state : TensorVBState
        The q-state (``state.mean[d]``, ``state.cov[d]`` are not read).
    problem : TensorProblem
        The problem.
    d : int
        The mode.
    chunk : int
        Entries per chunk.
    """
    csr = problem.modes[d]
    m, K = csr.shape[0], state.mean[0].shape[-1]
    C, dtype = state.mean[0].shape[0], state.mean[0].dtype
    pos, valid = _chunks(csr.index.shape[0], chunk)

    def body(acc, xs):
        p, ok = xs
        Ew, Eww = _entry_moments(state, problem.index[csr.index[p]], d)
        w = ok.astype(dtype)
        rid = csr.row_ids[p]  # sorted: p is increasing
        G = _row_sums(Eww * w[None, :, None, None], rid, m)
        r = _row_sums((csr.values[p] * w)[None, :, None] * Ew, rid, m)
        return (acc[0] + G, acc[1] + r), None

    zeros = (jnp.zeros((C, m, K, K), dtype), jnp.zeros((C, m, K), dtype))
    return jax.lax.scan(body, zeros, (pos, valid))[0]


def _bcast(t, ndim: int):
    """A per-run precision (C,) as (C, 1, ...) of ``ndim`` axes; a scalar as it is."""
    t = jnp.asarray(t)
    return t if t.ndim == 0 else jnp.reshape(t, t.shape + (1,) * (ndim - 1))


def _inverse_from_cholesky(L: jax.Array) -> jax.Array:
    K = L.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(K, dtype=L.dtype), L.shape)
    Linv = jax.lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.swapaxes(Linv, -1, -2) @ Linv


def update_mode(state: TensorVBState, problem: TensorProblem, d: int, row_prec, t):
    """The optimal ``q`` of every row of mode ``d`` given the other modes: ``(means (C,
    m_d, K), covariances (C, m_d, K, K))``.

    Parameters
    ----------
    state : TensorVBState
        The q-state.
    problem : TensorProblem
        The problem.
    d : int
        The mode.
    row_prec : jax.Array, shape (C, K)
        The rows' expected prior precision ``E[1/gamma]`` (diagonal).
    t : float or jax.Array, shape (C,)
        The block precision.
    """
    G, r = mode_moments(state, problem, d)
    K = G.shape[-1]
    P = _bcast(t, 4) * G + prior_precision_term(row_prec, K, G.dtype)
    L = cholesky_rows(P)
    return solve_rows(L, _bcast(t, 3) * r), _inverse_from_cholesky(L)


def factor_stats(state: TensorVBState) -> jax.Array:
    """``E_q[S_h] = sum_d sum_i (m_d[i, h]^2 + S_d[i][h, h])`` (C, K).

    Parameters
    ----------
    state : TensorVBState
        The q-state.
    """
    return sum(
        jnp.sum(m**2, axis=1) + jnp.sum(jnp.diagonal(S, axis1=-2, axis2=-1), axis=1)
        for m, S in zip(state.mean, state.cov)
    )


def expected_sq_error(state: TensorVBState, problem: TensorProblem, chunk: int = CHUNK):
    """``sum_e E_q[(y_e - theta_e)^2]`` (C,): ``sum_e y_e^2 - 2 y_e E[theta_e] +
    E[theta_e^2]`` with ``E[theta_e] = sum_h prod_d m_d[i_de, h]`` and ``E[theta_e^2] =
    sum_{h,l} prod_d (S_d + m_d m_d^T)[i_de][h, l]``, over chunks of ``chunk`` entries.

    Parameters
    ----------
    state : TensorVBState
        The q-state.
    problem : TensorProblem
        The problem.
    chunk : int
        Entries per chunk.
    """
    pos, valid = _chunks(problem.values.shape[0], chunk)
    dtype = state.mean[0].dtype

    def body(acc, xs):
        p, ok = xs
        Ew, Eww = _entry_moments(state, problem.index[p], None)
        y, w = problem.values[p], ok.astype(dtype)
        part = (
            jnp.sum(w * y**2)
            - 2.0 * jnp.einsum("n,cnk->c", w * y, Ew)
            + jnp.einsum("n,cnkl->c", w, Eww)
        )
        return acc + part, None

    return jax.lax.scan(body, jnp.zeros(state.mean[0].shape[0], dtype), (pos, valid))[0]


def update(
    state: TensorVBState, problem: TensorProblem, prior, tau, *, likelihood=None
) -> TensorVBState:
    """One CAVI iteration: the rows of mode 0, 1, ..., D - 1 in turn (each given the
    others' current q), then ``q(gamma)`` (:meth:`~bmczoo.priors.Prior.vb_step` at
    ``E[S]`` summed over the modes, ``sum_d m_d`` rows), then a learned ``q(tau)``.  Each
    step is the exact optimum of its factor given the others: the ELBO never decreases.

    Parameters
    ----------
    state : TensorVBState
        The q-state.
    problem : TensorProblem
        The problem.
    prior : bmczoo.priors.Prior
        A column-scale prior.
    tau : float or jax.Array
        The fixed likelihood precision (a learned one reads ``state.noise``).
    likelihood : bmczoo.likelihoods.Likelihood, optional
        Tempered (default) or LearnedNoise.
    """
    from ...likelihoods import Tempered

    lik = Tempered() if likelihood is None else likelihood
    t = lik.vb_block_precision(state.noise, tau)
    row_prec, _ = prior.vb_row_priors({"inv_gamma": state.inv_gamma})[0]
    for d in range(len(state.mean)):
        m, S = update_mode(state, problem, d, row_prec, t)
        state = state._replace(
            mean=state.mean[:d] + (m,) + state.mean[d + 1 :],
            cov=state.cov[:d] + (S,) + state.cov[d + 1 :],
        )
    ES = factor_stats(state)
    dtype = ES.dtype
    step = prior.vb_step(ES, jnp.zeros_like(ES), sum(problem.shape), 0, dtype)
    state = state._replace(inv_gamma=step["inv_gamma"])
    if lik.learned:
        sq = expected_sq_error(state, problem)
        state = state._replace(noise=lik.vb_step(state.noise, sq, problem.values.shape[0]))
    return state


def elbo(state: TensorVBState, problem: TensorProblem, prior, tau, *, likelihood=None):
    """The evidence lower bound of each run (C,): the likelihood's term
    (:meth:`~bmczoo.likelihoods.base.Likelihood.vb_elbo_term` at ``sum_e E[(y_e -
    theta_e)^2]``), the prior's (:meth:`~bmczoo.priors.Prior.vb_elbo_term`: ``q(gamma)``
    at its optimum for the current ``E[S]``, true right after :func:`update`) and the rows'
    Gaussian entropies.

    Parameters
    ----------
    state : TensorVBState
        The q-state.
    problem : TensorProblem
        The problem.
    prior : bmczoo.priors.Prior
        A column-scale prior.
    tau : float or jax.Array
        The fixed likelihood precision.
    likelihood : bmczoo.likelihoods.Likelihood, optional
        Tempered (default) or LearnedNoise.
    """
    from ...likelihoods import Tempered

    lik = Tempered() if likelihood is None else likelihood
    sq = expected_sq_error(state, problem)
    loglik = lik.vb_elbo_term(state.noise, problem.values.shape[0], sq, tau)
    ES = factor_stats(state)
    rows = sum(problem.shape)
    prior_part = prior.vb_elbo_term({"inv_gamma": state.inv_gamma}, ES, jnp.zeros_like(ES), rows, 0)
    K = state.mean[0].shape[-1]
    logdet = sum(jnp.sum(jnp.linalg.slogdet(S)[1], axis=1) for S in state.cov)
    return loglik + prior_part + 0.5 * rows * K * (1.0 + _LOG_2PI) + 0.5 * logdet
