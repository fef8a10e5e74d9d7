"""Conjugate blocked Gibbs sampler for every prior of the zoo.

Functional core in the BlackJAX style: :func:`build_problem` prepares the device data
once, :func:`init` and :func:`step` are pure functions over the typed
:class:`GibbsState`; :class:`ConjugateGibbs` wraps them in a NumPyro ``MCMCKernel``.

One sweep (docs/algorithms.md, "The Gibbs blocks"): all rows of ``M`` given ``N, gamma``
(one batched Cholesky), all rows of ``N`` given ``M, gamma``, then ``gamma`` from the
prior's exact conditional given ``S_h = ||M_h||^2 + ||N_h||^2``.  Chains live on a leading axis and
are advanced together (their sparse products stacked as extra dense columns); chain
``c`` uses its own key, so chain ``c`` of a vectorised run equals a single-chain run
with that key.  With ``overrelax = rho != 0`` the rows are updated by Adler's
over-relaxation within the same exact Gaussian conditionals (still invariant for the
posterior); ``rho = -0.7`` gives theta entries 2.5-4.5x the effective sample size of
plain Gibbs on the paper's m = 200 problem (``benchmarks/bench_overrelax.py``).

While sampling, the state accumulates, without storing draws: the sum of ``theta`` at
requested entries over kept draws (the posterior mean) and of its square (the posterior
variance), and, when test values are
given, the RMSE per iteration of the current draw and of the running posterior mean.

Optional moves at the end of a sweep: the column moves (:func:`column_moves`; docs/algorithms.md,
"Column moves") and, for the discrete prior, the annealed spike/slab switch
(:func:`annealed_switch`, every ``anneal_every`` sweeps).
"""

from __future__ import annotations

import dataclasses
import math
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _rng
from ..data import RatingData
from ..offsets import shift_clip
from ..priors import Prior
from . import sharding as sh
from . import thinning
from .settings import check_anneal, check_column_moves_every, check_overrelax, check_spike_and_slab
from jax import lax

from .kernels import _row_ids
from .kernels import (
    CSR,
    cholesky_rows,
    csr_from_view,
    outer,
    overrelaxed_rows,
    pack_upper,
    pattern_product,
    prior_precision_term,
    unpack_upper,
)

__all__ = [
    "GibbsProblem",
    "GibbsState",
    "build_problem",
    "init",
    "step",
    "sweep",
    "theta_at",
    "entries",
    "check_failure",
    "factors",
    "draws",
    "check_overrelax",
    "column_moves",
    "column_log_marginal",
    "annealed_switch",
    "annealed_path",
]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "rows",
        "cols",
        "tau",
        "pred_rows",
        "pred_cols",
        "test_values",
        "offset",
        "clip_lo",
        "clip_hi",
        "track_rows",
        "track_cols",
        "sum_sq",
        "levels",
        "col_perm",
        "cut_step",
        "links",
    ],
    meta_fields=[
        "num_warmup",
        "thinning",
        "num_total",
        "has_test",
        "dims",
        "mesh",
        "overrelax",
        "likelihood",
        "biases",
        "num_ratings",
        "column_moves",
        "column_moves_every",
        "anneal_steps",
        "anneal_every",
        "link_sites",
    ],
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
        traces; 0 disables them).
    dims : the true ``(m1, m2)``.
    mesh : None (one device) or the :class:`jax.sharding.Mesh` the sweep is sharded over
        (see :mod:`bmczoo.inference.sharding`); then ``rows`` / ``cols`` hold per-device
        blocks and the factors have their rows padded to a multiple of the device count.
    overrelax : coefficient ``rho`` in (-1, 1) of the over-relaxed row updates
        (:func:`bmczoo.inference.kernels.overrelaxed_rows`); 0 is plain Gibbs.
    likelihood : the likelihood component (None: fixed ``tau``); a learned ``tau`` gets
        its Gibbs block (:meth:`~bmczoo.likelihoods.Likelihood.sample_tau`).
    biases : the :class:`~bmczoo.offsets.Biases` component or None.
    num_ratings : ``n``.
    column_moves : whether each sweep ends with the column moves
        (:func:`column_moves`; docs/algorithms.md, "Column moves").
    anneal_steps, anneal_every : the annealed spike/slab switch (:func:`annealed_switch`):
        its number of steps (0: none) and every how many sweeps it runs.  These last
        thirteen are static pytree metadata.
    sum_sq : ``sum_k Y_k^2`` of the fitted values (for the squared error of a learned tau).
    levels, col_perm, cut_step : a latent likelihood's data (probit, ordered probit; empty
        otherwise): the level index of each rating in row order (n,), the row-order position
        of each rating in column order (n,), and the random-walk scale of the cut points.
    links : the arrays of the prior's feature links (:meth:`~bmczoo.priors.Prior.gibbs_links`;
        empty without a link: then the sweep calls the prior's plain hooks).
    link_sites : the prior's state variables kept in the draws only with the factors
        (:attr:`~bmczoo.priors.Prior.link_sites`; static).
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
    sum_sq: jax.Array
    levels: jax.Array
    col_perm: jax.Array
    cut_step: jax.Array
    num_warmup: int
    thinning: int
    num_total: int
    has_test: bool
    dims: tuple[int, int] = (0, 0)
    mesh: object = None
    overrelax: float = 0.0
    likelihood: object = None
    biases: object = None
    num_ratings: int = 0
    column_moves: bool = False
    column_moves_every: int = 1
    anneal_steps: int = 0
    anneal_every: int = 1
    links: dict = dataclasses.field(default_factory=dict)
    link_sites: tuple = ()

    @property
    def learned_tau(self) -> bool:
        return self.likelihood is not None and self.likelihood.learned

    @property
    def latent(self) -> bool:
        """Whether the likelihood observes the ratings through a latent Gaussian ``z``."""
        return self.likelihood is not None and self.likelihood.latent

    def block_precision(self, tau):
        """The precision the factor and bias blocks see, per chain."""
        return tau if self.likelihood is None else self.likelihood.block_precision(tau)


class GibbsState(NamedTuple):
    """State of ``C`` chains.

    ``M`` (C, m1, K), ``N`` (C, m2, K), ``prior_state`` the prior's variables (a dict of
    (C, ...) arrays: ``{"gamma": (C, K)}`` for the column-scale priors, ``mu_M``,
    ``Lambda_M``, ``mu_N``, ``Lambda_N`` for the Normal-Wishart prior), ``tau`` (C,) the
    noise precision (constant unless the likelihood learns it), ``row_bias`` (C, m1),
    ``col_bias`` (C, m2) and ``bias_var`` (C, 2) (zero / unused without biases),
    ``key`` (C,) PRNG keys,
    ``iteration`` number of sweeps done, ``pred_sum`` (C, P) sum of ``theta`` at the
    requested entries over kept draws, ``pred_sq`` (C, P) sum of ``theta^2`` there (the
    posterior variance, without stored draws), ``num_kept``, ``rmse_draw`` / ``rmse_mean``
    (C, num_total) test RMSE of each iteration's draw / of the running posterior mean
    (NaN before the first kept draw), ``failure`` (C, 3) int32: ``(sweep, block, row)``
    of the first non-finite draw of each chain (block 0: ``M``, 1: ``N``, 2: ``gamma``),
    ``-1`` while none happened (see :func:`check_failure`), ``lik_state`` a latent
    likelihood's variables (``z`` (C, n) in row order, ``cuts`` (C, L-1); empty
    otherwise), ``proba_sum`` (C, P, L) the sum over kept draws of the level probabilities
    at the requested entries (L = 0 for a Gaussian likelihood), ``switches`` (C, 2) int32
    the accepted and the attempted annealed switches of each chain (:func:`annealed_switch`).
    """

    M: jax.Array
    N: jax.Array
    prior_state: dict
    tau: jax.Array
    row_bias: jax.Array
    col_bias: jax.Array
    bias_var: jax.Array
    key: jax.Array
    iteration: jax.Array
    pred_sum: jax.Array
    pred_sq: jax.Array
    num_kept: jax.Array
    rmse_draw: jax.Array
    rmse_mean: jax.Array
    failure: jax.Array
    lik_state: dict = {}
    proba_sum: jax.Array | None = None
    switches: jax.Array | None = None

    @property
    def gamma(self) -> jax.Array:
        """The column scales (C, K) of a column-scale prior."""
        return self.prior_state["gamma"]


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
    mesh=None,
    overrelax: float = 0.0,
    likelihood=None,
    biases=None,
    column_moves: bool = False,
    anneal_steps: int = 0,
    anneal_every: int = 1,
    prior: Prior | None = None,
    column_moves_every: int = 1,
) -> GibbsProblem:
    """Prepare the device arrays of a problem (once; reused by every sweep).

    ``ratings`` holds the values the model is fitted to (already centred by the caller);
    ``predict`` are the (rows, cols) whose posterior mean of ``theta`` is accumulated and
    ``test_values`` their observed values on the original scale (for the RMSE traces).
    ``mesh`` (a :class:`jax.sharding.Mesh` or a list of devices) shards the sweep;
    ``overrelax`` in (-1, 1) over-relaxes the row updates (0: plain Gibbs).
    ``likelihood`` (a learned ``tau`` gets its block; ``tau`` is then its starting value)
    and ``biases`` (a :class:`~bmczoo.offsets.Biases` or None) are the model's other
    components.  ``column_moves`` ends each sweep with the column moves of
    :func:`column_moves` (every ``column_moves_every``-th sweep when that is above 1);
    ``anneal_steps > 0`` adds the annealed spike/slab switch (:func:`annealed_switch`)
    every ``anneal_every`` sweeps.  ``prior``: the arrays of its feature links
    (:meth:`~bmczoo.priors.Prior.gibbs_links`; docs/algorithms.md, "Feature links (side
    information)") are built from ``ratings`` (a prior with a link must be given here).
    """
    overrelax = check_overrelax(overrelax)
    anneal_steps, anneal_every = check_anneal(anneal_steps, anneal_every)
    column_moves_every = check_column_moves_every(column_moves_every)
    if not isinstance(column_moves, (bool, np.bool_)):
        raise TypeError(f"column_moves must be True or False, got {column_moves!r}")
    m1, m2 = ratings.shape
    likelihood = bind_likelihood(likelihood, ratings)
    latent = likelihood is not None and likelihood.latent
    if latent and mesh is not None:
        raise ValueError(
            f"the {likelihood.name} likelihood runs on one device: its sharded latent block is not "
            "implemented (drop devices=)"
        )
    pr, pc, tr, tc, tv = _entries(ratings, predict, track, test_values)
    links = (
        prior.gibbs_links(ratings, dtype)
        if prior is not None and hasattr(prior, "gibbs_links")
        else {}
    )
    if links and mesh is not None:
        raise ValueError(
            f"{prior.name} with feature links runs on one device: its sharded link block is not "
            "implemented (drop devices=)"
        )
    has_test = tv.shape[0] > 0
    lo, hi = clip if clip is not None else (-np.inf, np.inf)
    if mesh is not None:
        mesh = sh.make_mesh(mesh)
        rows = sh.shard_csr(ratings.row_view, (m1, m2), dtype, mesh)
        cols = sh.shard_csr(ratings.col_view, (m2, m1), dtype, mesh)
    else:
        rows = csr_from_view(ratings.row_view, (m1, m2), dtype)
        cols = csr_from_view(ratings.col_view, (m2, m1), dtype)
    problem = GibbsProblem(
        rows=rows,
        cols=cols,
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
        dims=(int(m1), int(m2)),
        mesh=mesh,
        overrelax=overrelax,
        likelihood=likelihood,
        biases=biases,
        num_ratings=int(ratings.n),
        column_moves=bool(column_moves),
        column_moves_every=column_moves_every,
        anneal_steps=anneal_steps,
        anneal_every=anneal_every,
        sum_sq=jnp.asarray(
            _sum_sq(ratings.values) if likelihood is not None and likelihood.learned else 0.0, dtype
        ),
        **_latent_data(likelihood, ratings, dtype),
        links=links,
        link_sites=tuple(getattr(prior, "link_sites", ())) if links else (),
    )
    if mesh is not None:  # everything but the rating blocks is replicated
        rep = sh.replicated(mesh)
        problem = dataclasses.replace(
            problem,
            **{
                f: sh.put(getattr(problem, f), rep)
                for f in (
                    "tau",
                    "pred_rows",
                    "pred_cols",
                    "test_values",
                    "offset",
                    "clip_lo",
                    "clip_hi",
                    "track_rows",
                    "track_cols",
                    "sum_sq",
                )
            },
        )
    return problem


def bind_likelihood(likelihood, ratings: RatingData):
    """A latent likelihood bound to the data (levels, threshold) when it is not yet
    (:meth:`bmczoo.likelihoods.probit.LatentLikelihood.bind`); others unchanged."""
    if likelihood is not None and likelihood.latent and not likelihood.bound:
        return likelihood.bind(ratings.values)
    return likelihood


def _latent_data(likelihood, ratings: RatingData, dtype) -> dict:
    """``levels`` (row order), ``col_perm`` and ``cut_step`` of a latent likelihood (empty
    arrays otherwise)."""
    if not (likelihood is not None and likelihood.latent):
        e = jnp.zeros(0, jnp.int32)
        return {"levels": e, "col_perm": e, "cut_step": jnp.zeros(0, dtype)}
    rv, cv = ratings.row_view, ratings.col_view
    levels = likelihood.level_index(rv.values)
    row_pos = np.empty(ratings.n, np.int64)
    row_pos[np.asarray(rv.order)] = np.arange(ratings.n)
    return {
        "levels": jnp.asarray(levels),
        "col_perm": jnp.asarray(row_pos[np.asarray(cv.order)].astype(np.int32)),
        "cut_step": jnp.asarray(likelihood.cut_step(levels), dtype),
    }


def _entries(ratings: RatingData, predict, track, test_values):
    """The checked requested and tracked entries and the test values (float64)."""
    empty = np.zeros(0, np.int32)
    pr, pc = predict if predict is not None else (empty, empty)
    pr, pc = ratings.check_entries(pr, pc, "predict")
    tr, tc = track if track is not None else (empty, empty)
    tr, tc = ratings.check_entries(tr, tc, "track")
    tv = np.asarray(test_values if test_values is not None else np.zeros(0), dtype=np.float64)
    if tv.ndim != 1 or tv.shape[0] > pr.shape[0]:
        raise ValueError(
            f"test_values has shape {tv.shape}; it must cover the first entries of predict ({pr.shape[0]})"
        )
    if not np.all(np.isfinite(tv)):
        raise ValueError("test_values must be finite")
    return pr, pc, tr, tc, tv


def _sum_sq(values) -> float:
    """``sum_k Y_k^2`` in float64 (inf when it overflows the working precision: the tau
    draws then fail and :func:`check_failure` says so)."""
    with np.errstate(over="ignore"):
        return float(np.sum(np.square(np.asarray(values, np.float64))))


def _padded_dims(problem: GibbsProblem) -> tuple[int, int]:
    m1, m2 = problem.dims
    if problem.mesh is None:
        return m1, m2
    D = problem.mesh.devices.size
    return sh.padded_size(m1, D), sh.padded_size(m2, D)


def factors(state: GibbsState, problem: GibbsProblem) -> tuple[jax.Array, jax.Array]:
    """``M`` (C, m1, K) and ``N`` (C, m2, K) without the padding rows of a sharded run."""
    m1, m2 = problem.dims
    return state.M[:, :m1], state.N[:, :m2]


def draws(state: GibbsState, problem: GibbsProblem, store_factors: bool = False) -> dict:
    """What is kept of a draw, per chain: the prior's variables (``gamma`` (C, K), or
    ``mu_M``, ``Lambda_M``, ...), ``theta`` (C, T) at the tracked entries, ``tau`` (C,)
    when learned, ``row_bias_var`` / ``col_bias_var`` (C,) with biases and, with
    ``store_factors``, ``M`` (C, m1, K) and ``N`` (C, m2, K) (and the biases ``row_bias``
    (C, m1), ``col_bias`` (C, m2))."""
    out = {k: v for k, v in state.prior_state.items() if k not in problem.link_sites}
    if (
        store_factors and problem.links
    ):  # a feature link's B, from its coordinates in the sweep's state
        from ..priors import macau

        out.update(macau.stored_links(state.prior_state, problem.links))
    out["theta"] = entries(state, problem, problem.track_rows, problem.track_cols)
    if problem.learned_tau:
        out["tau"] = state.tau
    out.update({k: v for k, v in state.lik_state.items() if k != "z"})  # learned cut points
    if problem.biases is not None:
        out["row_bias_var"], out["col_bias_var"] = state.bias_var[:, 0], state.bias_var[:, 1]
    if store_factors:
        out["M"], out["N"] = factors(state, problem)
        if problem.biases is not None:
            m1, m2 = problem.dims
            out["row_bias"], out["col_bias"] = state.row_bias[:, :m1], state.col_bias[:, :m2]
    return out


def entries(
    state: GibbsState, problem: GibbsProblem, rows: jax.Array, cols: jax.Array
) -> jax.Array:
    """``theta[rows, cols]`` of each chain (C, P), the biases included when the model has them."""
    t = theta_at(state.M, state.N, rows, cols)
    if problem.biases is not None:
        t = t + state.row_bias[:, rows] + state.col_bias[:, cols]
    return t


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
    prior_state: dict | None = None,
) -> GibbsState:
    """Initial state of ``C = len(keys)`` chains.

    By default the prior's variables are its :meth:`~bmczoo.priors.Prior.gibbs_state`
    (``gamma`` = the prior's ``init_gamma`` for the column-scale priors; ``gamma=`` or
    ``prior_state=`` override them, (C, ...) arrays) and ``M``, ``N`` are drawn from
    ``N(0, 1)`` scaled by ``sqrt(gamma)`` (or ``N(0, I)`` without column scales), with
    each chain's key (the first sweep overwrites ``M`` anyway).  ``tau`` starts at the
    problem's ``tau``, the biases at zero and their variances at the component's start.
    """
    C = keys.shape[0]
    m1, m2 = problem.dims
    dtype = problem.rows.values.dtype
    state0 = prior.gibbs_state(K, m1, m2, dtype)
    if problem.links:
        state0 = {**state0, **prior.link_state(K, problem.links, dtype)}
    elif getattr(prior, "gibbs_links", None) is not None and getattr(prior, "linked_sides", ()):
        raise ValueError(
            f"{prior} has feature links: build the problem with build_problem(..., prior=prior)"
        )
    state0 = jax.tree.map(lambda x: jnp.broadcast_to(x, (C,) + x.shape), state0)
    if gamma is not None:
        prior_state = {**(prior_state or {}), "gamma": gamma}
    for name, value in (prior_state or {}).items():
        if name not in state0:
            raise ValueError(
                f"{prior.name} has no variable {name!r}; its variables are {', '.join(state0)}"
            )
        state0[name] = jnp.broadcast_to(jnp.asarray(value, dtype), state0[name].shape)
    split = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    keys, kM, kN = split[:, 0], split[:, 1], split[:, 2]
    sd = jnp.sqrt(state0["gamma"])[:, None, :] if "gamma" in state0 else jnp.ones((C, 1, K), dtype)
    if M is None:
        M = jax.vmap(lambda k: _rng.normal(k, (m1, K), dtype))(kM) * sd
    if N is None:
        N = jax.vmap(lambda k: _rng.normal(k, (m2, K), dtype))(kN) * sd
    M, N = jnp.asarray(M, dtype), jnp.asarray(N, dtype)
    if M.shape != (C, m1, K) or N.shape != (C, m2, K):
        raise ValueError(
            f"initial M, N must have shapes {(C, m1, K)}, {(C, m2, K)}, got {M.shape}, {N.shape}"
        )
    P = problem.pred_rows.shape[0]
    T = problem.num_total if problem.has_test else 0
    var0 = problem.biases.init_variance() if problem.biases is not None else 1.0
    lik_state, L = {}, 0
    if problem.latent:
        lik = problem.likelihood
        L = lik.num_levels
        lik_state = {"z": jnp.zeros((C, problem.num_ratings), dtype)}
        if lik.fixed_cuts() is None:
            cuts0 = lik.init_cuts(np.asarray(problem.levels))
            lik_state["cuts"] = jnp.broadcast_to(jnp.asarray(cuts0, dtype), (C, L - 1))
    state = GibbsState(
        M=M,
        N=N,
        prior_state=state0,
        tau=jnp.broadcast_to(jnp.asarray(problem.tau, dtype), (C,)),
        row_bias=jnp.zeros((C, m1), dtype),
        col_bias=jnp.zeros((C, m2), dtype),
        bias_var=jnp.full((C, 2), var0, dtype),
        key=keys,
        iteration=jnp.zeros((), jnp.int32),
        pred_sum=jnp.zeros((C, P), dtype),
        pred_sq=jnp.zeros((C, P), dtype),
        num_kept=jnp.zeros((), jnp.int32),
        rmse_draw=jnp.full((C, T), jnp.nan, dtype),
        rmse_mean=jnp.full((C, T), jnp.nan, dtype),
        failure=jnp.full((C, 3), -1, jnp.int32),
        lik_state=lik_state,
        proba_sum=jnp.zeros((C, P, L), dtype),
        switches=jnp.zeros((C, 2), jnp.int32),
    )
    return place(state, problem)


#: state fields whose axis 1 holds the rows of M / of N (padded and sharded on a mesh)
_ROW_FIELDS = {"M": 0, "row_bias": 0, "N": 1, "col_bias": 1}


def place(state: GibbsState, problem: GibbsProblem) -> GibbsState:
    """Put a state with unpadded ``M`` (C, m1, K), ``N`` (C, m2, K) (and biases) where
    ``problem`` runs: unchanged on one device; on a mesh, the rows padded and sharded, the
    rest replicated (used by :func:`init` and to restore checkpoints)."""
    if problem.mesh is None:
        return state
    padded = _padded_dims(problem)
    rep = sh.replicated(problem.mesh)
    out = {}
    for f in GibbsState._fields:
        x = getattr(state, f)
        if f in _ROW_FIELDS:
            x = (
                sh.pad_rows(x, padded[_ROW_FIELDS[f]])
                if x.ndim == 3
                else _pad_vec(x, padded[_ROW_FIELDS[f]])
            )
            spec = jax.sharding.PartitionSpec(None, sh.AXIS, *([None] * (x.ndim - 2)))
            out[f] = sh.put(x, jax.sharding.NamedSharding(problem.mesh, spec))
        else:
            out[f] = jax.tree.map(lambda a: sh.put(a, rep), x)
    return GibbsState(**out)


def _pad_vec(x: jax.Array, m_pad: int) -> jax.Array:
    return jnp.pad(x, ((0, 0), (0, m_pad - x.shape[1])))


def _normals(keys, m: int, K: int, dtype) -> jax.Array:
    # one normal draw per chain from that chain's key (chain c does not depend on C, nor on
    # the number of devices: a sharded sweep slices these same draws)
    return jax.vmap(lambda k: _rng.normal(k, (m, K), dtype))(keys)


def _side(
    csr: CSR,
    own,
    other,
    z,
    zb,
    bias_own,
    bias_other,
    prior,
    tb,
    inv_var,
    *,
    rho: float,
    use_bias: bool,
    sse: bool,
    cross: bool,
    values=None,
):
    """Half a sweep: the biases of the rows being updated (with biases), then their factor
    rows (exact Gaussian conditionals, docs/algorithms.md, "Rows of the factors" and
    "Normal-Wishart rows").

    ``own`` (C, m, K) are the rows being replaced, ``other`` (C, m_other, K) the other
    factor (all rows), ``bias_own`` (C, m) / ``bias_other`` (C, m_other) the biases,
    ``prior = (precision, shift)`` the rows' prior, ``tb`` (C,) the block precision,
    ``inv_var`` (C,) ``1/s^2`` of these biases.  One sparse product with the rating pattern
    gives the per-row sums ``sum_j N_j N_j^T`` (packed), and with biases ``sum_j N_j``,
    ``sum_j c_j N_j`` and ``sum_j c_j``; one with the ratings gives ``sum_j Y_ij N_j`` (and
    ``sum_j Y_ij``); ``values`` (C, n), when given, replace the ratings per chain.  The rows' right-hand side uses the residual ``Y_ij - b_i - c_j``.

    Returns the new rows, the new biases, a (C, m) non-finite mask and, with ``sse``, this
    side's part of ``SSE - sum Y^2`` (C,) (``cross``: the terms that need both sides' final
    values, computed on the second side).
    """
    C, m_other, K = other.shape
    dtype = other.dtype
    Gp, r, sumO, sumBO, sumB, sumY = _row_sums(csr, other, bias_other, use_bias, values)
    G = unpack_upper(Gp, K)
    part = jnp.zeros((C,), dtype)
    if use_bias:
        count = jnp.diff(csr.indptr).astype(dtype)
        p = inv_var[:, None] + tb[:, None] * count
        mean = tb[:, None] * (sumY - sumB - jnp.sum(own * sumO, axis=-1)) / p
        bias_own = mean + zb * lax.rsqrt(p)
        r = r - bias_own[..., None] * sumO - sumBO
        if sse:
            part = part + jnp.sum(bias_own * (count * bias_own - 2.0 * sumY), axis=-1)
            if cross:
                part = part + 2.0 * jnp.sum(bias_own * sumB, axis=-1)
    precision, shift = prior
    P = tb[:, None, None, None] * G + prior_precision_term(precision, K, dtype)
    rhs = tb[:, None, None] * r
    if shift is not None:  # (C, K), or per row (C, m, K) with a feature link
        rhs = rhs + (shift if shift.ndim == 3 else shift[:, None, :])
    x = overrelaxed_rows(cholesky_rows(P), rhs, z, own, rho)
    if sse and cross:
        # sum_k theta_k^2 - 2 sum_k r_k theta_k over the ratings, from this side's sums; the
        # quadratic forms x_i^T G_i x_i from the packed upper triangles in one fused pass (XLA
        # on CPU runs an einsum over the (C, m, K, K) matrices as many tiny matrix products)
        part = part + _packed_quadratic(Gp, x) - 2.0 * jnp.sum(x * r, axis=(1, 2))
    # a failed Cholesky factorisation gives NaN factors, hence NaN draws
    return x, bias_own, ~jnp.all(jnp.isfinite(x), axis=-1), part


def _packed_quadratic(Gp, x):
    """``sum_i x_i^T G_i x_i`` per chain (C,) from the packed upper triangles ``Gp``
    (C, m, K(K+1)/2) of the symmetric ``G_i`` and the rows ``x`` (C, m, K)."""
    K = x.shape[-1]
    iu, ju = np.triu_indices(K)
    w = np.where(iu == ju, 1.0, 2.0).astype(np.dtype(x.dtype))  # off-diagonal entries appear twice
    return jnp.sum(Gp * pack_upper(outer(x)) * w, axis=(1, 2))


def _row_sums(csr: CSR, other, bias_other, use_bias: bool, values=None):
    """The per-row sums over the ratings that a half sweep and the column moves need, from
    two sparse products with the rating pattern (``other`` (C, m_other, K) the other
    factor, all rows): ``G_i = sum_j N_j N_j^T`` as packed upper triangles
    (C, m, K(K+1)/2, :func:`~bmczoo.inference.kernels.unpack_upper` gives (C, m, K, K)) and ``r_i = sum_j Y_ij N_j``
    (C, m, K), and with biases ``sum_j N_j``, ``sum_j c_j N_j`` (C, m, K), ``sum_j c_j``
    and ``sum_j Y_ij`` (C, m) (else None).  ``values`` (C, n), when given, replace the
    ratings per chain (one product per chain)."""
    C, m_other, K = other.shape
    T = K * (K + 1) // 2
    parts = [pack_upper(outer(other))]
    if use_bias:
        parts += [other, bias_other[..., None] * other, bias_other[..., None]]
    Gall = _pattern_product(csr, csr.ones, jnp.concatenate(parts, -1) if use_bias else parts[0])
    vparts = [other] + ([jnp.ones((C, m_other, 1), other.dtype)] if use_bias else [])
    Rdense = jnp.concatenate(vparts, -1) if use_bias else vparts[0]
    if values is None:
        Rall = _pattern_product(csr, csr.values, Rdense)
    else:  # per-chain values (a latent z): one product per chain
        Rall = jnp.stack([pattern_product(csr, values[i], Rdense[i]) for i in range(C)])
    G = Gall[..., :T]
    if not use_bias:
        return G, Rall, None, None, None, None
    return (
        G,
        Rall[..., :K],
        Gall[..., T : T + K],
        Gall[..., T + K : T + 2 * K],
        Gall[..., T + 2 * K],
        Rall[..., K],
    )


def _pattern_product(csr: CSR, data, dense):
    """``A @ dense`` per chain for the pattern ``A = (data, csr.index, csr.indptr)``:
    dense (C, m_other, W) -> (C, m, W), the chains stacked as columns of one product."""
    C, m_other, W = dense.shape
    out = pattern_product(csr, data, jnp.transpose(dense, (1, 0, 2)).reshape(m_other, C * W))
    return jnp.transpose(out.reshape(csr.shape[0], C, W), (1, 0, 2))


def _sweep_body(
    rows: CSR,
    cols: CSR,
    M,
    N,
    b,
    c,
    zM,
    zN,
    zb,
    zc,
    priors,
    tb,
    inv_var,
    comm: sh.Comm,
    *,
    rho,
    use_bias,
    sse,
    factor_stats,
    values=(None, None),
):
    """Rows of M (and their biases), then rows of N (and theirs), on this device's rows;
    returns the new local arrays, non-finite masks and the psum-ed statistics.
    ``values``: per-chain values (C, n) in row and in column order that replace the
    ratings (a latent likelihood's ``z``), or None."""
    (pM, pN) = priors
    N_all, c_all = comm.gather(N), comm.gather(c)
    M, b, badM, part1 = _side(
        rows,
        M,
        N_all,
        zM,
        zb,
        b,
        c_all,
        pM,
        tb,
        inv_var[:, 0],
        rho=rho,
        use_bias=use_bias,
        sse=sse,
        cross=False,
        values=values[0],
    )
    M, b = comm.mask(M, 0), comm.mask(b, 0)
    M_all, b_all = comm.gather(M), comm.gather(b)
    N, c, badN, part2 = _side(
        cols,
        N,
        M_all,
        zN,
        zc,
        c,
        b_all,
        pN,
        tb,
        inv_var[:, 1],
        rho=rho,
        use_bias=use_bias,
        sse=sse,
        cross=True,
        values=values[1],
    )
    N, c = comm.mask(N, 1), comm.mask(c, 1)
    stats_M, stats_N = (
        factor_stats if isinstance(factor_stats, tuple) else (factor_stats, factor_stats)
    )
    stats = comm.psum(
        (
            stats_M(M),
            stats_N(N),
            part1 + part2,
            jnp.stack([jnp.sum(b * b, axis=-1), jnp.sum(c * c, axis=-1)], axis=-1),
        )
    )
    return M, N, b, c, badM, badN, stats


def _sweep_factors(
    problem: GibbsProblem, state: GibbsState, prior: Prior, zM, zN, zb, zc, tb, values=None
):
    use_bias = problem.biases is not None
    kw = dict(
        rho=problem.overrelax,
        use_bias=use_bias,
        sse=problem.learned_tau,
        factor_stats=prior.factor_stats,
    )
    if problem.links:  # a feature link: per-row prior means, link statistics (one device)
        kw["factor_stats"] = tuple(
            functools.partial(prior.link_factor_stats, links=problem.links, side=s)
            for s in ("M", "N")
        )
        priors = prior.link_row_priors(state.prior_state, problem.links, *problem.dims)
    else:
        priors = prior.row_priors(state.prior_state)
    inv_var = 1.0 / state.bias_var
    if problem.mesh is None:
        vals = (None, None) if values is None else (values, values[:, problem.col_perm])
        return _sweep_body(
            problem.rows,
            problem.cols,
            state.M,
            state.N,
            state.row_bias,
            state.col_bias,
            zM,
            zN,
            zb,
            zc,
            priors,
            tb,
            inv_var,
            sh.LOCAL,
            values=vals,
            **kw,
        )
    p1, p2 = _padded_dims(problem)
    zM, zN = sh.pad_rows(zM, p1), sh.pad_rows(zN, p2)
    zb, zc = _pad_vec(zb, p1), _pad_vec(zc, p2)
    f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
    v = jax.sharding.PartitionSpec(None, sh.AXIS)
    comm = sh.sharded_comm(problem.dims)

    def body(rows, cols, M, N, b, c, zM, zN, zb, zc, priors, tb, inv_var):
        return _sweep_body(
            sh.local_csr(rows),
            sh.local_csr(cols),
            M,
            N,
            b,
            c,
            zM,
            zN,
            zb,
            zc,
            priors,
            tb,
            inv_var,
            comm,
            **kw,
        )

    csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
    return jax.shard_map(
        body,
        mesh=problem.mesh,
        in_specs=(csr_spec, csr_spec, f, f, v, v, f, f, v, v, r, r, r),
        out_specs=(f, f, v, v, v, v, r),
        check_vma=False,
    )(
        problem.rows,
        problem.cols,
        state.M,
        state.N,
        state.row_bias,
        state.col_bias,
        zM,
        zN,
        zb,
        zc,
        priors,
        tb,
        inv_var,
    )


def _first_failure(failure, iteration, masks):
    """Keep each chain's first ``(sweep, block, row)`` with a non-finite draw."""
    for block, bad in enumerate(masks):
        hit = jnp.any(bad, axis=1)
        new = jnp.stack(
            [
                jnp.broadcast_to(iteration, hit.shape),
                jnp.full(hit.shape, block),
                jnp.argmax(bad, axis=1),
            ],
            axis=1,
        ).astype(jnp.int32)
        failure = jnp.where(((failure[:, 0] < 0) & hit)[:, None], new, failure)
    return failure


def _variables(state: GibbsState) -> tuple[list[str], jax.Array]:
    """The names and (C, V) values of the non-factor variables (the prior's, tau, bias
    variances, a latent likelihood's cut points), flattened per chain, for the failure record."""
    names, values = [], []
    extra = {k: v for k, v in state.lik_state.items() if k != "z"}
    for name, x in {**state.prior_state, **extra}.items():
        size = int(np.prod(x.shape[1:], dtype=int))
        names += [f"{name}_{i + 1}" for i in range(size)] if size > 1 else [name]
        values.append(x.reshape(x.shape[0], -1))
    names += ["tau", "row_bias_var", "col_bias_var"]
    values += [state.tau[:, None], state.bias_var]
    return names, jnp.concatenate(values, axis=1)


def sweep(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One Gibbs sweep: (row biases,) rows of M, (column biases,) rows of N, then (tau,)
    the prior's variables (and the bias variances); records the first non-finite draw in
    ``failure``, other bookkeeping untouched."""
    m1, m2 = problem.dims
    K = state.M.shape[-1]
    dtype = state.M.dtype
    split = jax.vmap(lambda k: jax.random.split(k, 4))(state.key)
    keys, kM, kN, kg = split[:, 0], split[:, 1], split[:, 2], split[:, 3]
    use_bias = problem.biases is not None
    if use_bias or problem.learned_tau:
        # the extra components' keys come from the prior's key: a model without them
        # draws exactly as before they existed
        more = jax.vmap(lambda k: jax.random.split(k, 5))(kg)
        kg, kt, kb, kc, kv = (more[:, i] for i in range(5))
    zM, zN = _normals(kM, m1, K, dtype), _normals(kN, m2, K, dtype)
    if use_bias:
        zb = jax.vmap(lambda k: jax.random.normal(k, (m1,), dtype))(kb)
        zc = jax.vmap(lambda k: jax.random.normal(k, (m2,), dtype))(kc)
    else:
        zb, zc = jnp.zeros((zM.shape[0], m1), dtype), jnp.zeros((zM.shape[0], m2), dtype)
    tb = problem.block_precision(state.tau)
    lik_state, values = state.lik_state, None
    if problem.latent:
        # its own key stream: the other blocks draw from the keys they use without it
        lik_state = latent_block(
            state, problem, jax.vmap(lambda k: jax.random.fold_in(k, _LATENT_STREAM))(state.key)
        )
        values = lik_state["z"]
    M, N, b, c, badM, badN, (sM, sN, part, sumsq) = _sweep_factors(
        problem, state, prior, zM, zN, zb, zc, tb, values
    )
    tau = state.tau
    if problem.learned_tau:
        sse = jnp.maximum(problem.sum_sq + part, 0.0)  # rounding can take a tiny SSE below zero
        tau = jax.vmap(lambda k, e: problem.likelihood.sample_tau(k, e, problem.num_ratings))(
            kt, sse
        )
    bias_var = state.bias_var
    if use_bias:
        bias_var = jax.vmap(
            lambda k, q: jnp.stack(
                [
                    problem.biases.sample_variance(kk, qq, m)
                    for kk, qq, m in zip(jax.random.split(k), (q[0], q[1]), (m1, m2))
                ]
            )
        )(kv, sumsq)
    if problem.links:
        prior_state = jax.vmap(
            lambda k, s, a, b_: prior.link_update(k, s, a, b_, m1, m2, problem.links)
        )(kg, state.prior_state, sM, sN)
    else:
        prior_state = jax.vmap(lambda k, a, b_: prior.gibbs_update(k, a, b_, m1, m2))(kg, sM, sN)
    new = state._replace(
        M=M,
        N=N,
        prior_state=prior_state,
        tau=tau,
        row_bias=b,
        col_bias=c,
        bias_var=bias_var,
        key=keys,
        lik_state=lik_state,
    )
    if problem.column_moves:
        # its own key stream (folded from the sweep's key): the other blocks draw as without it
        kc = jax.vmap(lambda k: jax.random.fold_in(k, _COLUMN_STREAM))(state.key)
        if problem.column_moves_every == 1:
            new = column_moves(new, problem, prior, kc)
        else:  # every column_moves_every-th sweep: each sweep and each round leaves the posterior invariant
            due = (state.iteration + 1) % problem.column_moves_every == 0
            new = lax.cond(due, lambda s: column_moves(s, problem, prior, kc), lambda s: s, new)
    if problem.anneal_steps:
        # every anneal_every-th sweep; its own key stream, as the column moves
        ka = jax.vmap(lambda k: jax.random.fold_in(k, _ANNEAL_STREAM))(state.key)
        due = (state.iteration + 1) % problem.anneal_every == 0
        new = lax.cond(due, lambda s: annealed_switch(s, problem, prior, ka), lambda s: s, new)
    failure = _first_failure(
        state.failure, state.iteration + 1, (badM, badN, ~jnp.isfinite(_variables(new)[1]))
    )
    return new._replace(failure=failure)


# --------------------------------------------------------------------------- latent block
_LATENT_STREAM = 0x6C6174  # "lat"


def ratings_theta(state: GibbsState, problem: GibbsProblem) -> jax.Array:
    """``theta_k`` (C, n) at every rating, in row order (biases included)."""
    rows = problem.rows
    rid = _row_ids(rows)
    theta = jnp.einsum("cnk,cnk->cn", state.M[:, rid], state.N[:, rows.index])
    if problem.biases is not None:
        theta = theta + state.row_bias[:, rid] + state.col_bias[:, rows.index]
    return theta


def latent_cuts(state: GibbsState, problem: GibbsProblem) -> jax.Array:
    """The cut points (C, L-1) of each chain: learned (``lik_state["cuts"]``) or fixed."""
    if "cuts" in state.lik_state:
        return state.lik_state["cuts"]
    fixed = jnp.asarray(problem.likelihood.fixed_cuts(), state.M.dtype)
    return jnp.broadcast_to(fixed, (state.M.shape[0],) + fixed.shape)


def latent_block(state: GibbsState, problem: GibbsProblem, keys: jax.Array) -> dict:
    """A latent likelihood's block (probit, ordered probit): per chain, the cut points
    (when learned: Metropolis-Hastings with ``z`` integrated out) and then ``z`` (C, n)
    from its truncated normal given ``theta`` at the ratings (row order).  Exact block
    update of ``(cuts, z)`` given the factors and biases."""
    lik = problem.likelihood
    theta = ratings_theta(state, problem)
    cuts, z = lik.gibbs_latent(
        keys, theta, problem.levels, latent_cuts(state, problem), problem.cut_step
    )
    out = {"z": z}
    if "cuts" in state.lik_state:
        out["cuts"] = cuts
    return out


# --------------------------------------------------------------------------- column moves
_COLUMN_STREAM = 0x636F6C  # "col"


def column_moves(
    state: GibbsState, problem: GibbsProblem, prior: Prior, keys: jax.Array
) -> GibbsState:
    """Moves that change ``gamma_h`` together with its column (docs/algorithms.md, "Column moves").

    For each column ``h`` in turn, with ``N`` and the other columns fixed, ``M_h`` is
    integrated out (its entries are independent univariate Gaussians given the residual
    ``r_k`` without column ``h``: precision ``p_i = 1/gamma_h + tau sum_k N_jh^2``, mean
    ``tau sum_k r_k N_jh / p_i``); the prior's :meth:`~bmczoo.priors.Prior.column_proposal`
    proposes ``gamma_h'`` (the discrete prior: the spike/slab flip) together with ``N_h' =
    s N_h`` (``s = sqrt(gamma_h'/gamma_h)``), accepted by Metropolis-Hastings on the
    ``M_h``-marginal (prior of gamma, prior of ``N_h'``, the marginal likelihood with
    ``M_h`` integrated out, Jacobian ``m2 log s``); then ``M_h`` is drawn exactly given
    ``gamma_h`` and ``N``.  Then the same with the roles of ``M`` and ``N`` swapped.  Each
    step is an exact block update of ``(gamma_h, M_h, N_h)``, so the posterior stays
    invariant.  Learned noise enters through the block precision, biases through the
    residual.  Per side, two sparse products of the shared hot path (the per-row Gram
    matrices of the other factor and the per-row residual sums, as in a sweep), then
    O(m K^2) per column (:func:`_column_side`).  For a prior with a :meth:`~bmczoo.priors.Prior.column_block`
    (the discrete prior's slab) the flip is aimed by a reflection of the slab
    (:func:`_reflected_flip`): without it the signal spreads over every slab column (the
    posterior is rotation-invariant there) and no single column can be switched off.

    Parameters
    ----------
    state : GibbsState
        The chains' state after a sweep.
    problem : GibbsProblem
        The ratings, the model's components and the run's settings.
    prior : bmczoo.priors.Prior
        The prior; it must have column scales and a column move.
    keys : jax.Array, shape (C,)
        One PRNG key per chain.

    Returns
    -------
    GibbsState
        The state after the move.
    """
    if "gamma" not in state.prior_state or not prior.has_column_move:
        raise ValueError(
            f"the {prior.name or type(prior).__name__} prior has no column move "
            "(column_moves=True needs a prior with column scales that defines column_proposal)"
        )
    m1, m2 = problem.dims
    K, dt = state.M.shape[-1], state.M.dtype
    tb = problem.block_precision(state.tau)
    k = jax.vmap(jax.random.split)(keys)
    reflected = prior.column_block(state.gamma) is not None
    # the same draws on one device and sharded (the row draws padded and sliced there)
    d1, d2 = _move_draws(k[:, 0], K, m1, dt, reflected), _move_draws(k[:, 1], K, m2, dt, reflected)
    kw = dict(prior=prior, dims=(m1, m2), use_bias=problem.biases is not None)
    if problem.mesh is None:
        # a latent likelihood's z replace the ratings (per chain)
        values = (
            (state.lik_state["z"], state.lik_state["z"][:, problem.col_perm])
            if problem.latent
            else (None, None)
        )
        M, N, gamma = _column_body(
            problem.rows,
            problem.cols,
            state.M,
            state.N,
            state.row_bias,
            state.col_bias,
            state.gamma,
            tb,
            d1,
            d2,
            sh.LOCAL,
            values=values,
            **kw,
        )
    else:
        p1, p2 = _padded_dims(problem)
        d1, d2 = _pad_draws(d1, p1), _pad_draws(d2, p2)
        f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
        v = jax.sharding.PartitionSpec(None, sh.AXIS)
        dspec = {
            name: jax.sharding.PartitionSpec(None, None, sh.AXIS) if name in ("z", "z2") else r
            for name in d1
        }
        comm = sh.sharded_comm(problem.dims)

        def body(rows, cols, M, N, b, c, gamma, tb, d1, d2):
            return _column_body(
                sh.local_csr(rows), sh.local_csr(cols), M, N, b, c, gamma, tb, d1, d2, comm, **kw
            )

        csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
        M, N, gamma = jax.shard_map(
            body,
            mesh=problem.mesh,
            in_specs=(csr_spec, csr_spec, f, f, v, v, r, r, dspec, dspec),
            out_specs=(f, f, r),
            check_vma=False,
        )(
            problem.rows,
            problem.cols,
            state.M,
            state.N,
            state.row_bias,
            state.col_bias,
            state.gamma,
            tb,
            d1,
            d2,
        )
    return state._replace(M=M, N=N, prior_state={**state.prior_state, "gamma": gamma})


def _move_draws(keys, K: int, m: int, dt, reflected: bool) -> dict:
    """The random numbers of one side's moves, per chain: ``z`` (C, K, m) for the integrated
    column, ``zq`` (C, K) for the proposal, ``log_u`` (C, K); for the reflected flip also
    ``xi`` (C, K, K) (its direction, from a folded key: the other priors' moves draw as
    without it) and ``z2`` (C, K, m) (the redraw after a rejected switch-on)."""
    kk = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    out = dict(
        z=jax.vmap(lambda k: _rng.normal(k, (K, m), dt))(kk[:, 0]),
        zq=jax.vmap(lambda k: jax.random.normal(k, (K,), dt))(kk[:, 1]),
        log_u=jnp.log(jax.vmap(lambda k: jax.random.uniform(k, (K,), dt))(kk[:, 2])),
    )
    if reflected:
        kr = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 1), 2))(keys)
        out["xi"] = jax.vmap(lambda k: _rng.normal(k, (K, K), dt))(kr[:, 0])
        out["z2"] = jax.vmap(lambda k: _rng.normal(k, (K, m), dt))(kr[:, 1])
    return out


def _pad_draws(draws: dict, m_pad: int) -> dict:
    """Zero draws for the padding rows (they have no ratings, so they stay exactly zero)."""
    return {
        k: jnp.pad(x, ((0, 0), (0, 0), (0, m_pad - x.shape[2]))) if k in ("z", "z2") else x
        for k, x in draws.items()
    }


def _column_body(
    rows: CSR,
    cols: CSR,
    M,
    N,
    b,
    c,
    gamma,
    tb,
    d1,
    d2,
    comm: sh.Comm,
    *,
    prior,
    dims,
    use_bias,
    values=(None, None),
):
    """Both sides of the column moves on this device's rows (``comm``: see
    :class:`~bmczoo.inference.sharding.Comm`): ``M`` integrated and ``N`` rescaled, then
    the roles swapped.  Returns the new local ``M``, ``N`` and ``gamma``."""
    m1, m2 = dims
    M, T, gamma = _column_side(
        rows,
        M,
        comm.gather(N),
        b,
        comm.gather(c),
        gamma,
        tb,
        d1,
        prior,
        m1 + m2,
        m2,
        use_bias,
        values[0],
        comm.psum,
    )
    N = jnp.einsum("cjk,ckl->cjl", N, T)
    N, T, gamma = _column_side(
        cols,
        N,
        comm.gather(M),
        c,
        comm.gather(b),
        gamma,
        tb,
        d2,
        prior,
        m1 + m2,
        m1,
        use_bias,
        values[1],
        comm.psum,
    )
    return jnp.einsum("cjk,ckl->cjl", M, T), N, gamma


def column_log_marginal(gamma, A, B, tb):
    """``log int prod_i N(x_i; 0, gamma) exp(-tb/2 sum_k (r_k - x_i f_k)^2) dx`` up to the
    terms free of ``gamma`` and ``f``, per chain: ``sum_i -1/2 log(1 + gamma tb A_i) +
    tb^2 B_i^2 gamma / (2 (1 + gamma tb A_i))`` with ``A_i = sum_k f_k^2``, ``B_i = sum_k
    r_k f_k`` over row i's ratings.  gamma, tb (C,), A, B (C, m) -> (C,)."""
    gA = gamma[:, None] * tb[:, None] * A
    return jnp.sum(
        -0.5 * jnp.log1p(gA) + 0.5 * (tb[:, None] * B) ** 2 * gamma[:, None] / (1.0 + gA), axis=-1
    )


def _log_jacobian(m: int, log_s):
    """``log |d(s f)/df| = m log s`` of the rescaling of an m-vector (its own function so
    that the Geweke power check can break it)."""
    return m * log_s


def _column_side(
    csr: CSR,
    own,
    other,
    bias_own,
    bias_other,
    gamma,
    tb,
    draws: dict,
    prior,
    d: int,
    m_other: int,
    use_bias: bool,
    values,
    psum=lambda x: x,
):
    """The column moves with ``own`` (C, m, K) integrated out and ``other`` (C, m_other, K)
    rescaled, the ratings grouped by the rows of ``own`` (``csr``).  Returns the new
    ``own``, the (C, K, K) matrix ``T`` that ``other`` must be multiplied by, and the new
    ``gamma``.  ``m_other`` is the true number of rows of ``other``; sharded, ``own`` and
    ``csr`` are this device's rows, ``other`` all rows (padding rows zero) and ``psum``
    sums over the devices.

    Every quantity a move needs is a per-row sum over the ratings of the other factor's
    rows: with ``F0 = other`` at entry, the two sparse products of :func:`_row_sums` (as in
    a half sweep) give ``G0_i = sum_j F0_j F0_j^T`` and ``Y_i = sum_j (Y_ij - b_i - c_j)
    F0_j``.  The moves only rescale and reflect the columns of ``other``, so it stays ``F0
    T`` for a (C, K, K) matrix ``T`` tracked alongside; then for column ``h`` (``t = T e_h``)
    ``A_i = sum_j f_jh^2 = t^T G0_i t`` and the residual sum without column ``h`` is
    ``B_i = t^T Y_i - (G0_i t)^T (T x_i) + a_i A_i`` (``x_i`` the row of ``own``): O(m K^2)
    per column, with no pass over the ratings.  ``values`` (C, n) replace the ratings per
    chain (a latent likelihood's ``z``); ``draws``: :func:`_move_draws`."""
    C, m, K = own.shape
    dt = own.dtype
    G0, Y, sumO, sumBO, _, _ = _row_sums(csr, other, bias_other, use_bias, values)
    G0 = unpack_upper(G0, K)
    if use_bias:  # the residual of the biases too, as in _side
        Y = Y - bias_own[..., None] * sumO - sumBO
    S0 = jnp.einsum("cjk,cjl->ckl", other, other)
    z, zq, log_u = draws["z"], draws["zq"], draws["log_u"]

    if "xi" in draws:  # the reflected flip (see _reflected_flip): T mixes the slab's columns
        sums = functools.partial(_column_sums, G0, Y, S0)

        def body(h, carry):
            return _reflected_flip(
                h,
                carry,
                sums,
                S0,
                prior,
                tb,
                d,
                m_other,
                z[:, h],
                draws["z2"][:, h],
                draws["xi"][:, h],
                zq[:, h],
                log_u[:, h],
                psum,
            )

        T0 = jnp.broadcast_to(jnp.eye(K, dtype=dt), (C, K, K))
        return lax.fori_loop(0, K, body, (own, T0, gamma))

    # the plain move only rescales column h at step h: T stays diagonal (its diagonal
    # ``tdiag`` tracked) and T e_h = e_h when column h is visited, so the sums of
    # _column_sums are slices of G0, Y, S0 (O(m K) per column instead of O(m K^2); the
    # same numbers: the dropped terms are exact zeros)
    def body(h, carry):
        own, tdiag, gamma = carry
        g = gamma[:, h]
        A, B, ff = _column_sums_diagonal(G0, Y, S0, own, tdiag, h)
        g2, log_s, log_r = prior.column_proposal(g, zq[:, h], d)
        log_alpha = log_r + _flip_log_ratio(g, g2, log_s, A, B, ff, tb, m_other, psum)
        accept = log_u[:, h] < log_alpha
        g_new = jnp.where(accept, g2, g)
        s_eff = jnp.where(accept, jnp.exp(log_s), jnp.ones_like(g))
        a_new = _integrated_draw(g_new, s_eff, A, B, tb, z[:, h])
        return own.at[:, :, h].set(a_new), tdiag.at[:, h].multiply(s_eff), gamma.at[:, h].set(g_new)

    own, tdiag, gamma = lax.fori_loop(0, K, body, (own, jnp.ones((C, K), dt), gamma))
    return own, jax.vmap(jnp.diag)(tdiag), gamma


def _column_sums_diagonal(G0, Y, S0, own, tdiag, h):
    """:func:`_column_sums` for a diagonal ``T = diag(tdiag)`` whose column ``h`` is still
    ``e_h`` (the plain move): ``t = e_h``, so ``G0_i t``, ``t^T G0_i t``, ``t^T Y_i`` and
    ``t^T S0 t`` are entries of ``G0``, ``Y``, ``S0``, and ``T x_i = tdiag * x_i``."""
    gt = G0[:, :, :, h]
    A = gt[:, :, h]
    # an einsum, not jnp.sum(gt * x, -1): XLA on CPU reduces a fused product over a short
    # minor axis slowly for one chain, while the einsum is a dot
    # (benchmarks/bench_column_moves.py --chains 1)
    B = Y[:, :, h] - jnp.einsum("cmk,cmk->cm", gt, tdiag[:, None, :] * own) + own[:, :, h] * A
    return A, B, S0[:, h, h]


def _column_sums(G0, Y, S0, own, T, h):
    """``A_i``, ``B_i`` (C, m) of column ``h`` and ``sum_j f_jh^2`` (C,) for the state
    ``(own, F0 T)`` (see :func:`_column_side`)."""
    t = T[:, :, h]
    gt = jnp.einsum("cmkl,cl->cmk", G0, t)
    A = jnp.einsum("cmk,ck->cm", gt, t)
    fitted = jnp.einsum("ckl,cml->cmk", T, own)  # T x_i: row i's fit in F0's coordinates
    B = (
        jnp.einsum("cmk,ck->cm", Y, t) - jnp.einsum("cmk,cmk->cm", gt, fitted) + own[:, :, h] * A
    )  # einsum: see _column_sums_diagonal
    return A, B, jnp.einsum("ck,ckl,cl->c", t, S0, t)


def _flip_log_ratio(g, g2, log_s, A, B, ff, tb, m_other: int, psum=lambda x: x):
    """Log target ratio of ``(gamma_h, f) -> (g2, s f)`` with the own column integrated
    out: the prior of the rescaled column and the Jacobian ``m_other log s`` (they cancel for
    ``s = sqrt(g2/g)``; kept general for proposals that rescale otherwise) and the marginal
    likelihoods (summed over this device's rows, then ``psum``)."""
    s = jnp.exp(log_s)
    log_f = (
        -0.5 * m_other * (jnp.log(g2) - jnp.log(g))
        - 0.5 * ff * (s * s / g2 - 1.0 / g)
        + _log_jacobian(m_other, log_s)
    )
    return log_f + psum(
        column_log_marginal(g2, (s * s)[:, None] * A, s[:, None] * B, tb)
        - column_log_marginal(g, A, B, tb)
    )


def _integrated_draw(g, s, A, B, tb, z):
    """The own column's exact draw given ``gamma_h = g`` and the other column rescaled by
    ``s``: ``N(tb s B / p, 1/p)``, ``p = 1/g + tb s^2 A``, per row."""
    p = 1.0 / g[:, None] + tb[:, None] * (s * s)[:, None] * A
    return tb[:, None] * s[:, None] * B / p + z * lax.rsqrt(p)


#: concentration of the angular central Gaussian that aims the reflected flip at the
#: slab's least-energy direction (Sigma = I + lambda v v^T).  Any value keeps the posterior;
#: it sets how well a switch-off hits the column to remove (angular spread ~ lambda^-1/2:
#: a stray 10% of a strong column costs far more likelihood than the flip can gain).
#: Measured on the rank-3 simulation of ``benchmarks/bench_rank_mixing.py``: with 100,
#: chains entered rank 4 and stayed there for hundreds of sweeps (R-hat 1.13-1.15 over
#: 2000 sweeps); with 1000 every chain of seeds 0-3 (slab, spike and random starts) was at
#: rank 3 within 59 sweeps and in every draw after the 200 warm-up sweeps.
_ACG_LAMBDA = 1000.0


def _block_direction(gram, block):
    """Unit direction (C, K) of least energy ``x^T gram x`` (``gram = own^T own + other^T
    other``, (C, K, K)) within the columns of ``block`` (C, K) bool (zero outside it)."""
    big = jnp.trace(gram, axis1=-2, axis2=-1) + 1.0  # above every eigenvalue of the block
    inside = block[:, :, None] & block[:, None, :]
    G = jnp.where(inside, gram, 0.0) + jax.vmap(jnp.diag)(jnp.where(block, 0.0, big[:, None]))
    v = jnp.where(
        block, jnp.linalg.eigh(G)[1][:, :, 0], 0.0
    )  # exactly zero outside (eigh leaves ~eps there)
    return v / jnp.linalg.norm(v, axis=-1, keepdims=True)


def _acg_log_density(w, v, k):
    """Log density, relative to the uniform law on the unit sphere of the block (dimension
    ``k``), of the angular central Gaussian with ``Sigma = I + lambda v v^T`` at ``w``:
    ``-log(1 + lambda)/2 - (k/2) log(1 - lambda/(1 + lambda) (v.w)^2)``."""
    lam = _ACG_LAMBDA
    c = jnp.sum(v * w, axis=-1)
    return -0.5 * math.log1p(lam) - 0.5 * k * jnp.log1p(-(lam / (1.0 + lam)) * c * c)


def _householder(h: int, w, K: int):
    """(C, K, K) reflections swapping ``e_h`` and the unit vectors ``w`` (C, K) (identity
    where they coincide to within sqrt(eps): there ``u = e_h - w`` is rounding noise, and
    a reflection along it would mix columns at random)."""
    u = jax.nn.one_hot(h, K, dtype=w.dtype)[None] - w
    nu = jnp.sum(u * u, axis=-1)
    ok = nu > jnp.finfo(w.dtype).eps
    safe = jnp.where(ok, nu, 1.0)
    H = jnp.eye(K, dtype=w.dtype)[None] - 2.0 * u[:, :, None] * u[:, None, :] / safe[:, None, None]
    return jnp.where(ok[:, None, None], H, jnp.eye(K, dtype=w.dtype)[None])


def _reflected_flip(
    h, carry, sums, S0, prior, tb, d: int, m_other: int, z, z2, xi, zq, log_u, psum=lambda x: x
):
    """The spike/slab flip of column ``h`` aimed by a reflection of the slab (a move of
    :func:`column_moves` for priors with a :meth:`~bmczoo.priors.Prior.column_block`).

    Within the slab the posterior is invariant under rotations and reflections of the
    columns (equal scales; ``theta = M N^T`` unchanged), so the signal spreads over all slab
    columns and a plain flip is only accepted when column ``h`` happens to carry none.
    Switching off (``h`` in the slab): draw ``w`` from an angular central Gaussian aimed at
    the slab's least-energy direction ``v(x)`` (:func:`_block_direction`), reflect the slab
    by the Householder map ``H_w`` (``e_h <-> w``), then flip ``h`` on the reflected state as
    the plain move does (own column integrated out, the other rescaled).  Switching on (``h``
    in the spike): draw ``w`` uniformly on the sphere of the slab plus ``h``, flip, draw the
    own column from its conditional, then reflect.  The two are each other's reverse, with
    the proposal ratio ``q_on(w) / q_off(w | x)`` (uniform over the angular central
    Gaussian, the latter at the slab state: before the switch-off, after the switch-on) in
    the acceptance; the reflections have unit Jacobian and leave the joint unchanged.  On
    rejection the state is kept; a rejected switch-on then redraws the own column from its
    conditional (a Gibbs step, fresh normals ``z2``; not after a rejected switch-off, whose
    acceptance depends on that column)."""
    own, T, gamma = carry
    C, m, K = own.shape
    dt = own.dtype
    slab = prior.column_block(gamma)
    block = slab | (jnp.arange(K) == h)[None]
    k = jnp.sum(block, axis=-1).astype(dt)
    off = slab[:, h]

    def gram(own_x, T_x):  # own^T own + other^T other, other = F0 T
        return psum(jnp.einsum("cmk,cml->ckl", own_x, own_x)) + jnp.einsum(
            "cjk,cjl,clm->ckm", T_x, S0, T_x
        )

    xi = jnp.where(block, xi, 0.0)
    v = _block_direction(gram(own, T), block)
    aimed = xi + (math.sqrt(1.0 + _ACG_LAMBDA) - 1.0) * jnp.sum(v * xi, axis=-1, keepdims=True) * v
    w = jnp.where(off[:, None], aimed, xi)
    # exactly inside the block: a reflection must not touch the other columns (their scales differ)
    w = jnp.where(block, w, 0.0)
    w = w / jnp.linalg.norm(w, axis=-1, keepdims=True)
    H = _householder(h, w, K)
    own_r, T_r = (
        jnp.einsum("cmk,ckl->cml", own, H),
        jnp.einsum("cjk,ckl->cjl", T, H),
    )  # theta unchanged
    own_b = jnp.where(off[:, None, None], own_r, own)
    T_b = jnp.where(off[:, None, None], T_r, T)
    g = gamma[:, h]
    A, B, ff = sums(own_b, T_b, h)
    g2, log_s, log_r = prior.column_proposal(g, zq, d)
    log_alpha = log_r + _flip_log_ratio(g, g2, log_s, A, B, ff, tb, m_other, psum)
    s = jnp.exp(log_s)
    own_p = own_b.at[:, :, h].set(_integrated_draw(g2, s, A, B, tb, z))
    T_p = T_b.at[:, :, h].multiply(s[:, None])
    own_p = jnp.where(
        off[:, None, None], own_p, jnp.einsum("cmk,ckl->cml", own_p, H)
    )  # switching on: reflect last
    T_p = jnp.where(off[:, None, None], T_p, jnp.einsum("cjk,ckl->cjl", T_p, H))
    log_q = jnp.where(
        off,
        -_acg_log_density(w, v, k),
        _acg_log_density(w, _block_direction(gram(own_p, T_p), block), k),
    )
    accept = log_u < log_alpha + log_q
    # rejected: the current state.  Switching on, whose acceptance does not depend on the
    # current own column h, then redraws it from its conditional (a Gibbs step; its sums are
    # A, B: nothing was reflected); switching off must not: its acceptance depends on that
    # column through v(x), so a redraw only after a rejection would not keep the posterior
    # (the column moves' Geweke test rejects that variant on gamma_min)
    own_keep = jnp.where(
        off[:, None, None],
        own,
        own.at[:, :, h].set(_integrated_draw(g, jnp.ones_like(g), A, B, tb, z2)),
    )
    acc = accept[:, None, None]
    return (
        jnp.where(acc, own_p, own_keep),
        jnp.where(acc, T_p, T),
        gamma.at[:, h].set(jnp.where(accept, g2, g)),
    )


# --------------------------------------------------------------------------- annealed switch
_ANNEAL_STREAM = 0x616E6E  # "ann"


def annealed_switch(
    state: GibbsState, problem: GibbsProblem, prior: Prior, keys: jax.Array
) -> GibbsState:
    """Switch one column between the spike and the slab along an annealing path, accepted
    by Metropolis-Hastings on the work done (non-equilibrium candidate Monte Carlo).

    Each chain picks a column ``h`` uniformly and proposes to move ``gamma_h`` to the
    other value of the discrete prior (:meth:`~bmczoo.priors.Prior.column_proposal`):
    over ``T = problem.anneal_steps`` steps ``gamma_h`` follows the geometric path from its
    value to the other one, and after each step but the last the factors are updated by
    a kernel that keeps the joint at the current ``gamma_h`` invariant and is reversible
    (rows of ``M``, rows of ``N``, rows of ``M`` again: a palindrome of exact Gibbs
    blocks; the other variables fixed).  The proposal is the path's end point; its log
    acceptance ratio is the prior odds of the two values of ``gamma_h`` plus the work
    ``sum_t [log p(M_h, N_h | g_t) - log p(M_h, N_h | g_(t-1))]`` at the states visited (the
    likelihood does not depend on ``gamma_h``).  The reverse switch follows the reversed
    path with the same reversible kernels, so the move keeps the posterior invariant
    (Neal's tempered transitions; Nilmeier et al. 2011, PNAS 108, E1009).  Unlike the
    column moves' flip (one step, the own column integrated out) the factors follow the
    change of scale, so a switch that needs a column to grow or shrink a long way (a
    second factor on MovieLens) is accepted where a one-step flip is not.

    Costs ``1.5 (T - 1)`` sweeps of the factors; :func:`sweep` runs it every
    ``problem.anneal_every`` sweeps.  Sharded like the sweep on a mesh; biases and a
    learned noise precision stay fixed during the move (the residual subtracts the
    biases), a latent likelihood's ``z`` replace the ratings.

    Parameters
    ----------
    state : GibbsState
        The chains' state after a sweep.
    problem : GibbsProblem
        The ratings, the model's components and the run's settings.
    prior : bmczoo.priors.Prior
        The prior; the discrete prior (spike and slab).
    keys : jax.Array, shape (C,)
        One PRNG key per chain.

    Returns
    -------
    GibbsState
        The state after the move.
    """
    check_spike_and_slab(prior)
    C, _, K = state.M.shape
    dt = state.M.dtype
    k = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)
    h = jax.vmap(lambda kk: jax.random.randint(kk, (), 0, K))(k[:, 0])
    log_u = jnp.log(jax.vmap(lambda kk: jax.random.uniform(kk, (), dt))(k[:, 2]))
    M, N, gamma, log_ratio = annealed_path(state, problem, prior, k[:, 1], h, problem.anneal_steps)
    accept = log_u < log_ratio  # a NaN work (a failed factorisation) rejects
    acc = accept[:, None, None]
    counts = jnp.stack([accept.astype(jnp.int32), jnp.ones_like(accept, jnp.int32)], axis=-1)
    return state._replace(
        M=jnp.where(acc, M, state.M),
        N=jnp.where(acc, N, state.N),
        prior_state={**state.prior_state, "gamma": jnp.where(accept[:, None], gamma, state.gamma)},
        switches=state.switches + counts,
    )


def annealed_path(
    state: GibbsState,
    problem: GibbsProblem,
    prior: Prior,
    keys: jax.Array,
    h: jax.Array,
    steps: int,
):
    """The annealed path of :func:`annealed_switch` for column ``h`` (C,) int of each chain
    over ``steps`` steps (``keys`` (C,): the kernels' keys).  Returns the path's end ``(M,
    N, gamma)`` and its log acceptance ratio (C,): the prior odds of the two values of
    ``gamma_h`` plus the work."""
    C, _, K = state.M.shape
    m1, m2 = problem.dims
    dt = state.M.dtype
    T = int(steps)
    if T < 1:
        raise ValueError(f"steps must be at least 1, got {steps!r}")
    tb = problem.block_precision(state.tau)
    onehot = jax.nn.one_hot(h, K, dtype=dt)  # (C, K)
    g0 = jnp.sum(state.gamma * onehot, axis=-1)
    g1, _, log_odds = prior.column_proposal(g0, jnp.zeros_like(g0), m1 + m2)
    values = _path_values(state, problem)

    def with_scale(gamma, g):
        return jnp.where(onehot > 0, g[:, None], gamma)

    def perturb(t, M, N, gamma, work):
        g_t = jnp.where(t == T, g1, g0 * jnp.exp((t / T) * (jnp.log(g1) - jnp.log(g0))))
        g_prev = jnp.sum(gamma * onehot, axis=-1)
        work = (
            work
            + _log_column_prior(M, N, onehot, g_t, m1 + m2)
            - _log_column_prior(M, N, onehot, g_prev, m1 + m2)
        )
        return with_scale(gamma, g_t), work

    def body(t, carry):  # step t + 1 of the path, then the kernel at g_(t+1)
        M, N, gamma, work = carry
        gamma, work = perturb(t + 1, M, N, gamma, work)
        kk = jax.vmap(lambda key: jax.random.split(jax.random.fold_in(key, t), 3))(keys)
        z = (
            _normals(kk[:, 0], m1, K, dt),
            _normals(kk[:, 1], m2, K, dt),
            _normals(kk[:, 2], m1, K, dt),
        )
        priors = prior.row_priors({**state.prior_state, "gamma": gamma})
        M, N = _path_kernel(problem, priors, M, N, z, tb, values)
        return M, N, gamma, work

    M, N, gamma, work = lax.fori_loop(
        0, T - 1, body, (state.M, state.N, state.gamma, jnp.zeros((C,), dt))
    )
    gamma, work = perturb(T, M, N, gamma, work)
    return M, N, gamma, work + log_odds


def _path_values(state: GibbsState, problem: GibbsProblem):
    """The values the path's half sweeps fit, per chain, in row and in column order ((C,
    n) each; sharded: this device's ratings): the ratings (a latent likelihood's ``z``)
    minus the biases, which stay fixed along the path, so computed once per switch;
    ``(None, None)`` when they are the ratings themselves (then the half sweeps use the
    ratings of the pattern, one product for all chains)."""
    use_bias = problem.biases is not None
    if not problem.latent and not use_bias:
        return None, None
    b, c = state.row_bias, state.col_bias
    if problem.mesh is None:
        z = state.lik_state["z"] if problem.latent else None
        yr, yc = (z, z[:, problem.col_perm]) if problem.latent else (None, None)
        if use_bias:
            yr, yc = _bias_residual(problem.rows, yr, b, c), _bias_residual(problem.cols, yc, c, b)
        return yr, yc
    comm = sh.sharded_comm(
        problem.dims
    )  # sharded: biases only (a latent likelihood runs on one device)

    def body(rows, cols, b, c):
        return (
            _bias_residual(sh.local_csr(rows), None, b, comm.gather(c)),
            _bias_residual(sh.local_csr(cols), None, c, comm.gather(b)),
        )

    csr_spec, v = jax.sharding.PartitionSpec(sh.AXIS), jax.sharding.PartitionSpec(None, sh.AXIS)
    return jax.shard_map(
        body,
        mesh=problem.mesh,
        in_specs=(csr_spec, csr_spec, v, v),
        out_specs=(v, v),
        check_vma=False,
    )(problem.rows, problem.cols, b, c)


def _path_kernel(problem: GibbsProblem, priors, M, N, z, tb, values):
    """The annealed path's kernel at the rows' ``priors``: rows of ``M``, rows of ``N``,
    rows of ``M`` again (exact Gibbs blocks with the normals ``z``, three (C, m, K) arrays,
    fitting ``values`` of :func:`_path_values`; biases, ``tau`` and a latent likelihood's
    ``z`` fixed), on one device or sharded as the sweep (:func:`_sweep_factors`)."""
    if problem.mesh is None:
        return _path_body(problem.rows, problem.cols, M, N, *z, priors, tb, sh.LOCAL, values)
    p1, p2 = _padded_dims(problem)
    z = (sh.pad_rows(z[0], p1), sh.pad_rows(z[1], p2), sh.pad_rows(z[2], p1))
    f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
    v = jax.sharding.PartitionSpec(None, sh.AXIS)
    comm = sh.sharded_comm(problem.dims)
    csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
    args = (problem.rows, problem.cols, M, N, *z, priors, tb)
    specs = (csr_spec, csr_spec, f, f, f, f, f, r, r)
    if values[0] is not None:  # the residual without the biases, per device

        def body(rows, cols, M, N, z1, z2, z3, priors, tb, vr, vc):
            return _path_body(
                sh.local_csr(rows), sh.local_csr(cols), M, N, z1, z2, z3, priors, tb, comm, (vr, vc)
            )

        args, specs = args + tuple(values), specs + (v, v)
    else:

        def body(rows, cols, M, N, z1, z2, z3, priors, tb):
            return _path_body(
                sh.local_csr(rows), sh.local_csr(cols), M, N, z1, z2, z3, priors, tb, comm, values
            )

    return jax.shard_map(
        body, mesh=problem.mesh, in_specs=specs, out_specs=(f, f), check_vma=False
    )(*args)


def _path_body(rows: CSR, cols: CSR, M, N, z1, z2, z3, priors, tb, comm: sh.Comm, values):
    """:func:`_path_kernel` on this device's rows (``values``: :func:`_path_values`, or
    None: the ratings)."""
    pM, pN = priors
    ones = jnp.ones((M.shape[0],), M.dtype)

    def half(csr, own, other, z, prior_rows, vals, which):
        zb = jnp.zeros(own.shape[:2], own.dtype)
        zo = jnp.zeros(other.shape[:2], own.dtype)
        new = _side(
            csr,
            own,
            other,
            z,
            zb,
            zb,
            zo,
            prior_rows,
            tb,
            ones,
            rho=0.0,
            use_bias=False,
            sse=False,
            cross=False,
            values=vals,
        )[0]
        return comm.mask(new, which)

    M = half(rows, M, comm.gather(N), z1, pM, values[0], 0)
    N = half(cols, N, comm.gather(M), z2, pN, values[1], 1)
    M = half(rows, M, comm.gather(N), z3, pM, values[0], 0)
    return M, N


def _bias_residual(csr: CSR, values, bias_own, bias_other):
    """``Y_ij - b_i - c_j`` (C, n) at the ratings of ``csr`` (grouped by the rows of
    ``bias_own`` (C, m), this device's; ``bias_other`` (C, m_other) all rows); ``values``
    (C, n) replace the ratings (a latent ``z``) when given."""
    y = csr.values[None] if values is None else values
    # a sharded block's padding entries have the row id b (out of range): clip, they are
    # not read by the products
    return y - jnp.take(bias_own, _row_ids(csr), axis=1, mode="clip") - bias_other[:, csr.index]


def _log_column_prior(M, N, onehot, g, d: int):
    """``log N(M_h; 0, g I) + log N(N_h; 0, g I)`` up to a constant, per chain (``h`` the
    column of ``onehot`` (C, K), ``d = m1 + m2``: padding rows of a sharded run are zero);
    its own function so that the Geweke power check can break the annealed switch's work."""
    sq = jnp.einsum("cmk,ck->c", M * M, onehot) + jnp.einsum("cjk,ck->c", N * N, onehot)
    return -0.5 * d * jnp.log(g) - 0.5 * sq / g


def check_failure(state: GibbsState, *, dtype=None) -> None:
    """Raise ``FloatingPointError`` naming the first non-finite draw, if any (host side).

    A draw of a row is non-finite when the Cholesky factorisation of its conditional
    precision failed (not positive definite in the working precision) or overflowed.
    """
    failure = np.asarray(jax.device_get(state.failure)).reshape(-1, 3)
    bad = np.flatnonzero(failure[:, 0] >= 0)
    if bad.size == 0:
        return
    c = int(bad[np.argmin(failure[bad, 0])])
    it, block, row = (int(v) for v in failure[c])
    dt = np.dtype(dtype if dtype is not None else state.M.dtype).name
    if block == 2:
        names = _variables(state)[0]
        what = f"{names[row] if row < len(names) else 'a variable'} (its conditional draw was not finite)"
    else:
        what = (
            f"row {row} of {'MN'[block]} (the Cholesky factorisation of its conditional precision "
            "failed or the draw overflowed)"
        )
    hint = (
        "rerun with dtype=jnp.float64"
        if dt != "float64"
        else "check the data scale and hyper-parameters"
    )
    raise FloatingPointError(
        f"Gibbs sweep {it}, chain {c}: non-finite draw of {what} in {dt}; {hint}"
    )


def _rmse(pred, problem: GibbsProblem):
    pred = pred[..., : problem.test_values.shape[0]]
    y = shift_clip(pred, problem.offset, problem.clip_lo, problem.clip_hi)
    return jnp.sqrt(jnp.mean((y - problem.test_values) ** 2, axis=-1))


def is_kept(iteration, problem: GibbsProblem):
    """Whether the draw after ``iteration`` sweeps is kept (:func:`bmczoo.inference.thinning.is_kept`,
    aligned with NumPyro's ``fori_collect`` when ``num_total`` is known)."""
    num_samples = problem.num_total - problem.num_warmup if problem.num_total else 0
    return thinning.is_kept(iteration, problem.num_warmup, num_samples, problem.thinning)


def step(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One sweep plus the running sums (posterior mean at requested entries, RMSE traces)."""
    state = sweep(state, problem, prior)
    it = state.iteration + 1
    theta = entries(state, problem, problem.pred_rows, problem.pred_cols)
    kept = is_kept(it, problem)
    pred_sum = jnp.where(kept, state.pred_sum + theta, state.pred_sum)
    pred_sq = jnp.where(kept, state.pred_sq + theta * theta, state.pred_sq)
    num_kept = state.num_kept + kept.astype(jnp.int32)
    proba_sum = state.proba_sum
    if problem.latent:
        # level probabilities of this draw at the requested entries (C, P, L)
        probs = level_probs(theta, latent_cuts(state, problem))
        proba_sum = jnp.where(kept, proba_sum + probs, proba_sum)
    rmse_draw, rmse_mean = state.rmse_draw, state.rmse_mean
    if problem.has_test and problem.num_total:
        denom = jnp.maximum(num_kept, 1).astype(pred_sum.dtype)
        if problem.latent:  # RMSE of the expected level (data scale)
            lik = problem.likelihood
            draw_pred, mean_pred = lik.expected_value(probs), lik.expected_value(proba_sum / denom)
            r_draw, r_mean = _rmse_values(draw_pred, problem), _rmse_values(mean_pred, problem)
        else:
            r_draw, r_mean = _rmse(theta, problem), _rmse(pred_sum / denom, problem)
        idx = jnp.minimum(it - 1, problem.num_total - 1)
        rmse_draw = rmse_draw.at[:, idx].set(r_draw)
        rmse_mean = rmse_mean.at[:, idx].set(jnp.where(num_kept > 0, r_mean, jnp.nan))
    return state._replace(
        iteration=it,
        pred_sum=pred_sum,
        pred_sq=pred_sq,
        num_kept=num_kept,
        rmse_draw=rmse_draw,
        rmse_mean=rmse_mean,
        proba_sum=proba_sum,
    )


def level_probs(theta: jax.Array, cuts: jax.Array) -> jax.Array:
    """``P(Y = l | theta, c)`` (C, P, L) of a latent likelihood: theta (C, P), cuts (C, L-1)."""
    from ..likelihoods.probit import level_log_probs

    return jnp.exp(level_log_probs(theta, cuts[:, None, :]))


def _rmse_values(pred, problem: GibbsProblem):
    """RMSE of data-scale predictions (C, P) against the test values."""
    pred = pred[..., : problem.test_values.shape[0]]
    return jnp.sqrt(jnp.mean((pred - problem.test_values) ** 2, axis=-1))
