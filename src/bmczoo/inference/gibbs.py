"""Conjugate blocked Gibbs sampler for every prior of the zoo.

Functional core in the BlackJAX style: :func:`build_problem` prepares the device data
once, :func:`init` and :func:`step` are pure functions over the typed
:class:`GibbsState`; :class:`ConjugateGibbs` wraps them in a NumPyro ``MCMCKernel``.

One sweep (DESIGN.md section 2): all rows of ``M`` given ``N, gamma`` (one batched
Cholesky), all rows of ``N`` given ``M, gamma``, then ``gamma`` from the prior's exact
conditional given ``S_h = ||M_h||^2 + ||N_h||^2``.  Chains live on a leading axis and
are advanced together (their sparse products stacked as extra dense columns); chain
``c`` uses its own key, so chain ``c`` of a vectorised run equals a single-chain run
with that key.

While sampling, the state accumulates, without storing draws: the sum of ``theta`` at
requested entries over kept draws (the posterior mean), and, when test values are
given, the RMSE per iteration of the current draw and of the running posterior mean.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..data import RatingData
from ..priors import Prior
from .kernels import CSR, cholesky_rows, csr_from_view, outer, row_precision, row_rhs, sample_rows

__all__ = ["GibbsProblem", "GibbsState", "build_problem", "init", "step", "sweep", "theta_at"]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "rows", "cols", "tau", "pred_rows", "pred_cols", "test_values", "offset",
        "clip_lo", "clip_hi", "track_rows", "track_cols",
    ],
    meta_fields=["num_warmup", "thinning", "num_total", "has_test"],
)
@dataclasses.dataclass(frozen=True)
class GibbsProblem:
    """Device data of one problem (built once by :func:`build_problem`).

    Attributes
    ----------
    rows, cols : CSR views of the ratings grouped by row / by column.
    tau : likelihood precision ``2 lam / n``.
    pred_rows, pred_cols : (P,) entries whose posterior mean is accumulated.
    test_values : (P_test,) observed values (original scale) at the first ``P_test``
        requested entries, for the RMSE traces (empty: no traces).
    offset : value added back to ``theta`` to predict (the training mean when centring).
    clip_lo, clip_hi : prediction range (``-inf, inf`` for no clipping).
    track_rows, track_cols : (T,) entries whose ``theta`` is recorded per kept draw.
    num_warmup, thinning, num_total : iteration bookkeeping (``num_total`` sizes the RMSE
        traces; 0 disables them).  These and ``has_test`` are static pytree metadata.
    """

    rows: CSR
    cols: CSR
    tau: jax.Array
    pred_rows: jax.Array
    pred_cols: jax.Array
    test_values: jax.Array
    offset: jax.Array
    clip_lo: jax.Array
    clip_hi: jax.Array
    track_rows: jax.Array
    track_cols: jax.Array
    num_warmup: int
    thinning: int
    num_total: int
    has_test: bool


class GibbsState(NamedTuple):
    """State of ``C`` chains.

    ``M`` (C, m1, K), ``N`` (C, m2, K), ``gamma`` (C, K), ``key`` (C,) PRNG keys,
    ``iteration`` number of sweeps done, ``pred_sum`` (C, P) sum of ``theta`` at the
    requested entries over kept draws, ``num_kept``, ``rmse_draw`` / ``rmse_mean``
    (C, num_total) test RMSE of each iteration's draw / of the running posterior mean
    (NaN before the first kept draw).
    """

    M: jax.Array
    N: jax.Array
    gamma: jax.Array
    key: jax.Array
    iteration: jax.Array
    pred_sum: jax.Array
    num_kept: jax.Array
    rmse_draw: jax.Array
    rmse_mean: jax.Array


def build_problem(
    ratings: RatingData,
    tau: float,
    *,
    dtype=jnp.float32,
    predict: tuple[np.ndarray, np.ndarray] | None = None,
    test_values: np.ndarray | None = None,
    offset: float = 0.0,
    clip: tuple[float, float] | None = None,
    track: tuple[np.ndarray, np.ndarray] | None = None,
    num_warmup: int = 0,
    thinning: int = 1,
    num_total: int = 0,
) -> GibbsProblem:
    """Prepare the device arrays of a problem (once; reused by every sweep).

    ``ratings`` holds the values the model is fitted to (already centred by the caller);
    ``predict`` are the (rows, cols) whose posterior mean of ``theta`` is accumulated and
    ``test_values`` their observed values on the original scale (for the RMSE traces).
    """
    m1, m2 = ratings.shape
    empty = np.zeros(0, np.int32)
    pr, pc = predict if predict is not None else (empty, empty)
    pr, pc = ratings.check_entries(pr, pc, "predict")
    tr, tc = track if track is not None else (empty, empty)
    tr, tc = ratings.check_entries(tr, tc, "track")
    tv = np.asarray(test_values if test_values is not None else np.zeros(0), dtype=np.float64)
    if tv.ndim != 1 or tv.shape[0] > pr.shape[0]:
        raise ValueError(f"test_values has shape {tv.shape}; it must cover the first entries of predict ({pr.shape[0]})")
    if not np.all(np.isfinite(tv)):
        raise ValueError("test_values must be finite")
    has_test = tv.shape[0] > 0
    lo, hi = clip if clip is not None else (-np.inf, np.inf)
    return GibbsProblem(
        rows=csr_from_view(ratings.row_view, (m1, m2), dtype),
        cols=csr_from_view(ratings.col_view, (m2, m1), dtype),
        tau=jnp.asarray(tau, dtype),
        pred_rows=jnp.asarray(pr, jnp.int32),
        pred_cols=jnp.asarray(pc, jnp.int32),
        test_values=jnp.asarray(tv, dtype),
        offset=jnp.asarray(offset, dtype),
        clip_lo=jnp.asarray(lo, dtype),
        clip_hi=jnp.asarray(hi, dtype),
        track_rows=jnp.asarray(tr, jnp.int32),
        track_cols=jnp.asarray(tc, jnp.int32),
        num_warmup=int(num_warmup),
        thinning=int(thinning),
        num_total=int(num_total),
        has_test=has_test,
    )


def theta_at(M: jax.Array, N: jax.Array, rows: jax.Array, cols: jax.Array) -> jax.Array:
    """``theta[rows, cols]`` for each chain: (C, m1, K), (C, m2, K) -> (C, P)."""
    return jnp.sum(M[:, rows] * N[:, cols], axis=-1)


def init(
    keys: jax.Array,
    problem: GibbsProblem,
    prior: Prior,
    K: int,
    *,
    gamma: jax.Array | None = None,
    M: jax.Array | None = None,
    N: jax.Array | None = None,
) -> GibbsState:
    """Initial state of ``C = len(keys)`` chains.

    By default ``gamma`` is the prior's ``init_gamma`` and ``M``, ``N`` are drawn from
    ``N(0, gamma)`` with each chain's key (the first sweep overwrites ``M`` anyway).
    """
    C = keys.shape[0]
    m1, m2 = problem.rows.shape
    dtype = problem.rows.values.dtype
    d = m1 + m2
    if gamma is None:
        gamma = jnp.broadcast_to(prior.init_gamma(K, d, dtype), (C, K))
    gamma = jnp.asarray(gamma, dtype)
    split = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    keys, kM, kN = split[:, 0], split[:, 1], split[:, 2]
    sd = jnp.sqrt(gamma)[:, None, :]
    if M is None:
        M = jax.vmap(lambda k: jax.random.normal(k, (m1, K), dtype))(kM) * sd
    if N is None:
        N = jax.vmap(lambda k: jax.random.normal(k, (m2, K), dtype))(kN) * sd
    P = problem.pred_rows.shape[0]
    T = problem.num_total if problem.has_test else 0
    return GibbsState(
        M=jnp.asarray(M, dtype),
        N=jnp.asarray(N, dtype),
        gamma=gamma,
        key=keys,
        iteration=jnp.zeros((), jnp.int32),
        pred_sum=jnp.zeros((C, P), dtype),
        num_kept=jnp.zeros((), jnp.int32),
        rmse_draw=jnp.full((C, T), jnp.nan, dtype),
        rmse_mean=jnp.full((C, T), jnp.nan, dtype),
    )


def _sample_factor(keys, csr: CSR, other: jax.Array, gamma: jax.Array, tau) -> jax.Array:
    P = row_precision(csr, outer(other), 1.0 / gamma, tau)
    L = cholesky_rows(P)
    rhs = row_rhs(csr, other, tau)
    # one normal draw per chain from that chain's key (chain c does not depend on C)
    z = jax.vmap(lambda k: jax.random.normal(k, rhs.shape[1:], rhs.dtype))(keys)
    return sample_rows(L, rhs, z)


def sweep(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One Gibbs sweep (M rows, N rows, gamma); bookkeeping untouched."""
    m1, m2 = problem.rows.shape
    split = jax.vmap(lambda k: jax.random.split(k, 4))(state.key)
    keys, kM, kN, kg = split[:, 0], split[:, 1], split[:, 2], split[:, 3]
    M = _sample_factor(kM, problem.rows, state.N, state.gamma, problem.tau)
    N = _sample_factor(kN, problem.cols, M, state.gamma, problem.tau)
    S = jnp.sum(M**2, axis=1) + jnp.sum(N**2, axis=1)
    gamma = jax.vmap(lambda k, s: prior.sample_conditional(k, s, m1 + m2))(kg, S)
    return state._replace(M=M, N=N, gamma=gamma, key=keys)


def _rmse(pred, problem: GibbsProblem):
    pred = pred[..., : problem.test_values.shape[0]]
    y = jnp.clip(pred + problem.offset, problem.clip_lo, problem.clip_hi)
    return jnp.sqrt(jnp.mean((y - problem.test_values) ** 2, axis=-1))


def is_kept(iteration, problem: GibbsProblem):
    """Whether the draw after ``iteration`` sweeps is kept (after warm-up, every
    ``thinning``-th; aligned with NumPyro's ``fori_collect`` when ``num_total`` is known)."""
    t = iteration - problem.num_warmup
    if problem.num_total:
        r = (problem.num_total - problem.num_warmup) % problem.thinning
        return (t > r) & ((t - r) % problem.thinning == 0)
    return (t > 0) & (t % problem.thinning == 0)


def step(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One sweep plus the running sums (posterior mean at requested entries, RMSE traces)."""
    state = sweep(state, problem, prior)
    it = state.iteration + 1
    theta = theta_at(state.M, state.N, problem.pred_rows, problem.pred_cols)
    kept = is_kept(it, problem)
    pred_sum = jnp.where(kept, state.pred_sum + theta, state.pred_sum)
    num_kept = state.num_kept + kept.astype(jnp.int32)
    rmse_draw, rmse_mean = state.rmse_draw, state.rmse_mean
    if problem.has_test and problem.num_total:
        mean = pred_sum / jnp.maximum(num_kept, 1).astype(pred_sum.dtype)
        r_mean = jnp.where(num_kept > 0, _rmse(mean, problem), jnp.nan)
        idx = jnp.minimum(it - 1, problem.num_total - 1)
        rmse_draw = rmse_draw.at[:, idx].set(_rmse(theta, problem))
        rmse_mean = rmse_mean.at[:, idx].set(r_mean)
    return state._replace(
        iteration=it, pred_sum=pred_sum, num_kept=num_kept, rmse_draw=rmse_draw, rmse_mean=rmse_mean
    )
