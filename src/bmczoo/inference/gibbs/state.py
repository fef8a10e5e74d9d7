"""The Gibbs sampler's data and state: :class:`GibbsProblem` (the device data of one
problem, built once by :func:`build_problem`), :class:`GibbsState` (``C`` chains) and
:func:`init`, with what reads a state (:func:`draws`, :func:`entries`, :func:`place`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import _rng
from ...data import Features, RatingData
from ...priors import Prior
from ...priors.macau.arrays import shared_link_arrays
from .. import sharding as sh
from ...linalg import CSR, csr_from_view, device_array
from ..settings import SweepOptions, resolve_column_moves, resolve_column_moves_every
from .per_rating import (
    bind_likelihood,
    check_likelihood_support,
    check_offsets_support,
    latent_data,
    likelihood_start,
    offset_arrays,
    offsets_shift,
    offsets_start,
)

__all__ = [
    "GibbsProblem",
    "GibbsState",
    "RunStats",
    "EntryArrays",
    "Entries",
    "Schedule",
    "build_problem",
    "init",
    "place",
    "theta_at",
    "entries",
    "factors",
    "draws",
    "padded_dims",
    "pad_vec",
]


class EntryArrays(NamedTuple):
    """The device arrays of the entries a run reads besides the ratings (a pytree).

    Attributes
    ----------
    pred_rows, pred_cols : (P,) entries whose posterior mean is accumulated.
    test_values : (P_test,) observed values (original scale) at the first ``P_test``
        requested entries, for the RMSE traces (empty: no traces).
    offset : value added back to ``theta`` to predict (the training mean when centring).
    clip_lo, clip_hi : prediction range (``-inf, inf`` for no clipping).
    track_rows, track_cols : (T,) entries whose ``theta`` is recorded per kept draw.
    """

    pred_rows: jax.Array
    pred_cols: jax.Array
    test_values: jax.Array
    offset: jax.Array
    clip_lo: jax.Array
    clip_hi: jax.Array
    track_rows: jax.Array
    track_cols: jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=[
        "rows",
        "cols",
        "tau",
        "entries",
        "sum_sq",
        "levels",
        "col_perm",
        "cut_step",
        "links",
        "bias_links",
        "offset_arrays",
    ],
    meta_fields=[
        "schedule",
        "options",
        "dims",
        "mesh",
        "likelihood",
        "biases",
        "num_ratings",
        "link_sites",
        "offsets",
    ],
)
@dataclasses.dataclass(frozen=True)
class GibbsProblem:
    """Device data of one problem (built once by :func:`build_problem`).

    Attributes
    ----------
    rows, cols : CSR views of the ratings grouped by row / by column.
    tau : likelihood precision ``2 lam / n``.
    entries : the requested and tracked entries, test values, offset and prediction
        range (:class:`EntryArrays`).
    sum_sq : ``sum_k Y_k^2`` of the fitted values (for the squared error of a learned tau).
    levels, col_perm, cut_step : a latent likelihood's data (probit, ordered probit; empty
        otherwise): the level index of each rating in row order (n,), the row-order position
        of each rating in column order (n,), and the random-walk scale of the cut points.
    links : the arrays of the prior's feature links (:meth:`~bmczoo.priors.Prior.gibbs_links`;
        empty without a link: then the sweep calls the prior's plain hooks); on a mesh
        those with one entry per row of the linked factor hold per-device blocks of its rows
        (:func:`bmczoo.inference.sharding.shard_links`).
    bias_links : the arrays of the biases' feature links
        (:meth:`~bmczoo.offsets.Biases.gibbs_links`; empty without one).
    offset_arrays : the sampled offsets' arrays at the ratings (row order), at the
        requested and at the tracked entries
        (:func:`bmczoo.inference.gibbs.per_rating.offset_arrays`; empty without offsets).
    schedule : iteration bookkeeping (:class:`Schedule`; ``num_total`` sizes the RMSE
        traces, 0 disables them).
    options : the sweep's options (:class:`~bmczoo.inference.settings.SweepOptions`,
        ``column_moves`` resolved to a bool): over-relaxation of the row updates
        (:func:`bmczoo.linalg.overrelaxed_rows`), the column moves (:func:`column_moves`;
        docs/algorithms.md, "Column moves") and every how many sweeps they run, and the
        annealed spike/slab switch (:func:`annealed_switch`: its number of steps, 0: none,
        and every how many sweeps it runs).
    dims : the true ``(m1, m2)``.
    mesh : None (one device) or the :class:`jax.sharding.Mesh` the sweep is sharded over
        (see :mod:`bmczoo.inference.sharding`); then ``rows`` / ``cols`` hold per-device
        blocks and the factors have their rows padded to a multiple of the device count.
    likelihood : the likelihood component (None: fixed ``tau``); a learned ``tau`` gets
        its Gibbs block (:meth:`~bmczoo.likelihoods.Likelihood.sample_tau`).
    biases : the :class:`~bmczoo.offsets.Biases` component or None.
    num_ratings : ``n``.
    link_sites : the prior's state variables kept in the draws only with the factors
        (:attr:`~bmczoo.priors.Prior.link_sites`).
    offsets : the sampled offsets (:class:`bmczoo.offsets.base.Offset`), a tuple.

    The fields from ``schedule`` on are static pytree metadata (a jitted sweep is traced
    once per distinct value).
    """

    rows: CSR
    cols: CSR
    tau: jax.Array
    entries: EntryArrays
    sum_sq: jax.Array
    levels: jax.Array
    col_perm: jax.Array
    cut_step: jax.Array
    schedule: Schedule
    options: SweepOptions
    dims: tuple[int, int] = (0, 0)
    mesh: object = None
    likelihood: object = None
    biases: object = None
    num_ratings: int = 0
    links: dict = dataclasses.field(default_factory=dict)
    link_sites: tuple = ()
    bias_links: dict = dataclasses.field(default_factory=dict)
    offsets: tuple = ()
    offset_arrays: dict = dataclasses.field(default_factory=dict)

    @property
    def has_test(self) -> bool:
        """Whether the run has test values (a static shape, also under tracing)."""
        return self.entries.test_values.shape[0] > 0

    @property
    def learned_tau(self) -> bool:
        return self.likelihood is not None and self.likelihood.learned

    @property
    def latent(self) -> bool:
        """Whether the likelihood observes the ratings through a latent Gaussian ``z``."""
        return self.likelihood is not None and self.likelihood.latent

    @property
    def weighted(self) -> bool:
        """Whether each rating has a weight with its own block (Student-t)."""
        return self.likelihood is not None and self.likelihood.weighted

    @property
    def all_pairs(self) -> bool:
        """Whether the likelihood observes every pair of the matrix (one-class)."""
        return self.likelihood is not None and self.likelihood.all_pairs

    def block_precision(self, tau):
        """The precision the factor and bias blocks see, per chain."""
        return tau if self.likelihood is None else self.likelihood.block_precision(tau)


class RunStats(NamedTuple):
    """What a run accumulates besides the chain (``C`` chains, ``P`` requested entries).

    ``pred_sum`` (C, P) sum of ``theta`` at the requested entries over kept draws,
    ``pred_sq`` (C, P) sum of ``theta^2`` there (the posterior variance, without stored
    draws), ``num_kept`` the number of kept draws, ``rmse_draw`` / ``rmse_mean``
    (C, num_total) test RMSE of each iteration's draw / of the running posterior mean (NaN
    before the first kept draw), ``failure`` (C, 3) int32: ``(sweep, block, row)`` of the
    first non-finite draw of each chain (block 0: ``M``, 1: ``N``, 2: ``gamma``), ``-1``
    while none happened (see :func:`check_failure`), ``proba_sum`` (C, P, L) the sum over
    kept draws of the level probabilities at the requested entries (L = 0 for a Gaussian
    likelihood), ``switches`` (C, 2) int32 the accepted and the attempted annealed switches
    of each chain (:func:`annealed_switch`).
    """

    pred_sum: jax.Array
    pred_sq: jax.Array
    num_kept: jax.Array
    rmse_draw: jax.Array
    rmse_mean: jax.Array
    failure: jax.Array
    proba_sum: jax.Array
    switches: jax.Array


class GibbsState(NamedTuple):
    """State of ``C`` chains, with the run's accumulators in ``stats``.

    ``M`` (C, m1, K), ``N`` (C, m2, K), ``prior_state`` the prior's variables (a dict of
    (C, ...) arrays: ``{"gamma": (C, K)}`` for the column-scale priors, ``mu_M``,
    ``Lambda_M``, ``mu_N``, ``Lambda_N`` for the Normal-Wishart prior), ``tau`` (C,) the
    noise precision (constant unless the likelihood learns it), ``row_bias`` (C, m1),
    ``col_bias`` (C, m2) and ``bias_var`` (C, 2) (zero / unused without biases),
    ``bias_link`` the variables of the biases' feature links (``row_bias_wt`` (C, F) the
    coordinates of ``w`` in the eigenbasis, ``row_bias_lam`` (C,), the same with ``col_``;
    empty without them, ``bmczoo.offsets.bias_link``),
    ``lik_state`` the likelihood's per-rating variables, in row order (a latent one's
    ``z`` (C, n) and ``cuts`` (C, L-1), a weighted one's ``w`` (C, n); empty otherwise), ``key`` (C,) PRNG keys, ``iteration`` number of sweeps
    done, and ``stats`` (:class:`RunStats`): the running sums, RMSE traces, failure record
    and switch counts.  The sweep's blocks read and write the chain's fields; only
    :func:`sweep` (the failure record), :func:`annealed_switch` (its counts) and
    :func:`step` (the running sums) write ``stats``.
    """

    M: jax.Array
    N: jax.Array
    prior_state: dict
    tau: jax.Array
    row_bias: jax.Array
    col_bias: jax.Array
    bias_var: jax.Array
    bias_link: dict
    lik_state: dict
    key: jax.Array
    iteration: jax.Array
    stats: RunStats
    offset_state: dict = {}

    @property
    def gamma(self) -> jax.Array:
        """The column scales (C, K) of a column-scale prior."""
        return self.prior_state["gamma"]


class Entries(NamedTuple):
    """The entries a run reads besides the ratings (:func:`build_problem`).

    Attributes
    ----------
    predict : (rows, cols) or None
        Entries whose posterior mean of ``theta`` is accumulated.
    test_values : array or None
        Observed values (original scale) at the first entries of ``predict``, for the RMSE
        traces (None: no traces).
    track : (rows, cols) or None
        Entries whose ``theta`` is recorded per kept draw (:func:`bmczoo.inference.problem.track_entries`).
    offset : float
        Added back to ``theta`` to predict (the training mean when centring).
    clip : (lo, hi) or None
        Prediction range of the RMSE traces (None: no clipping).
    context : bmczoo.data.Features or None
        The per-rating table of the ``predict`` entries (one row each), which sampled
        offsets read there.
    """

    predict: tuple | None = None
    test_values: np.ndarray | None = None
    track: tuple | None = None
    offset: float = 0.0
    clip: tuple | None = None
    context: Features | None = None


class Schedule(NamedTuple):
    """Iteration bookkeeping of a run: warm-up sweeps, every how many post-warm-up sweeps a
    draw is kept, and the total number of sweeps (it sizes the RMSE traces; 0: none)."""

    num_warmup: int = 0
    thinning: int = 1
    num_total: int = 0


#: the options of a plain sweep, :func:`build_problem`'s default
PLAIN_SWEEP = SweepOptions(column_moves=False, anneal_every=1)

#: the problem's fields replicated over a mesh (the rating blocks are sharded)
_REPLICATED = ("tau", "entries", "sum_sq")


def build_problem(
    ratings: RatingData,
    tau: float,
    *,
    dtype=jnp.float32,
    entries: Entries = Entries(),
    schedule: Schedule = Schedule(),
    options: SweepOptions = PLAIN_SWEEP,
    mesh=None,
    likelihood=None,
    biases=None,
    prior: Prior | None = None,
    offsets: tuple = (),
) -> GibbsProblem:
    """Prepare the device arrays of a problem (once; reused by every sweep).

    ``ratings`` holds the values the model is fitted to (already centred by the caller);
    ``entries`` (:class:`Entries`) the requested entries, test values and tracked entries;
    ``schedule`` (:class:`Schedule`) the warm-up, thinning and number of sweeps.
    ``options`` (:class:`~bmczoo.inference.settings.SweepOptions`, checked when built; the
    default: the plain sweep) over-relaxes the row updates, adds the column moves
    (:func:`~bmczoo.inference.gibbs.fused_moves` inside the sweep, or
    :func:`~bmczoo.inference.gibbs.column_moves` at its end; ``column_moves=None``: where
    ``prior`` has one; ``column_moves_every=None``: on ``prior``'s schedule, every sweep
    without a prior) and adds the annealed spike/slab switch
    (:func:`~bmczoo.inference.gibbs.annealed_switch`).  ``mesh`` (a
    :class:`jax.sharding.Mesh` or a list of devices) shards the sweep.  ``likelihood`` (a
    learned ``tau`` gets its block; ``tau`` is then its starting value) and ``biases`` (a
    :class:`~bmczoo.offsets.Biases` or None) are the model's other components.
    ``prior``: the arrays of its feature links (:meth:`~bmczoo.priors.Prior.gibbs_links`;
    docs/algorithms.md, "Feature links") are built from ``ratings`` (a linked prior must be
    given here), once for a table the biases link too.  ``offsets``: the sampled offsets
    (:class:`bmczoo.offsets.Offset`; at the requested entries from ``entries.context``)."""
    m1, m2 = ratings.shape
    likelihood = bind_likelihood(likelihood, ratings)
    offsets = check_offsets_support(offsets, mesh)
    check_likelihood_support(likelihood, mesh, options, offsets=offsets)
    entry_arrays = _entry_arrays(ratings, entries, dtype)
    with shared_link_arrays():  # a table linked by the prior and the biases: once
        bias_links = _bias_links(biases, ratings, dtype, mesh)
        mesh, rows, cols = _rating_blocks(ratings, dtype, mesh)
        links = _links(prior, ratings, dtype, mesh)
    column_moves = (
        resolve_column_moves(options.column_moves, prior)
        if prior is not None
        else bool(options.column_moves)
    )
    problem = GibbsProblem(
        rows=rows,
        cols=cols,
        tau=device_array(tau, dtype),
        entries=entry_arrays,
        sum_sq=device_array(
            _sum_sq(ratings.values) if likelihood is not None and likelihood.learned else 0.0, dtype
        ),
        **latent_data(likelihood, ratings, dtype, offsets),
        schedule=Schedule(*(int(v) for v in schedule)),
        options=dataclasses.replace(
            options,
            column_moves=column_moves,
            column_moves_every=resolve_column_moves_every(options.column_moves_every, prior),
        ),
        dims=(int(m1), int(m2)),
        mesh=mesh,
        likelihood=likelihood,
        biases=biases,
        num_ratings=int(ratings.n),
        links=links,
        link_sites=tuple(getattr(prior, "link_sites", ())) if links else (),
        bias_links=bias_links,
        offsets=offsets,
        offset_arrays=offset_arrays(offsets, ratings, entries, entry_arrays, dtype),
    )
    if mesh is not None:  # everything but the rating blocks is replicated
        rep = sh.replicated(mesh)
        problem = dataclasses.replace(
            problem,
            **{f: jax.tree.map(lambda x: sh.put(x, rep), getattr(problem, f)) for f in _REPLICATED},
        )
    return problem


def _rating_blocks(ratings: RatingData, dtype, mesh):
    """The mesh (None: one device) and the ratings by row and by column (per-device blocks
    on a mesh)."""
    m1, m2 = ratings.shape
    if mesh is None:
        rows = csr_from_view(ratings.row_view, (m1, m2), dtype)
        cols = csr_from_view(ratings.col_view, (m2, m1), dtype)
        return None, rows, cols
    mesh = sh.make_mesh(mesh)
    rows = sh.shard_csr(ratings.row_view, (m1, m2), dtype, mesh)
    cols = sh.shard_csr(ratings.col_view, (m2, m1), dtype, mesh)
    return mesh, rows, cols


def _links(prior, ratings: RatingData, dtype, mesh) -> dict:
    """The arrays of the prior's feature links (empty without a link); on a mesh, those
    with one entry per row of the linked factor split by rows like the factor, the others
    replicated (:func:`bmczoo.priors.macau.sharded.link_layout`)."""
    links = (
        prior.gibbs_links(ratings, dtype)
        if prior is not None and hasattr(prior, "gibbs_links")
        else {}
    )
    if links and mesh is not None:
        from ...priors.macau.sharded import link_layout

        links = sh.shard_links(links, link_layout(links), mesh)
    return links


def _bias_links(biases, ratings: RatingData, dtype, mesh) -> dict:
    """The arrays of the biases' feature links (empty without one)."""
    # a biases component without feature links need not have the hook
    gibbs_links = getattr(biases, "gibbs_links", None)
    links = gibbs_links(ratings, dtype) if gibbs_links is not None else {}
    if links and mesh is not None:
        raise ValueError(
            "Biases with features run on one device: their sharded link block is not "
            "implemented (drop devices=)"
        )
    return links


def _entry_arrays(ratings: RatingData, entries: Entries, dtype) -> EntryArrays:
    """The problem's arrays of the requested and tracked entries, test values, offset and
    prediction range (checked)."""
    pr, pc, tr, tc, tv = _entries(ratings, entries.predict, entries.track, entries.test_values)
    lo, hi = entries.clip if entries.clip is not None else (-np.inf, np.inf)
    return EntryArrays(
        pred_rows=device_array(pr, jnp.int32),
        pred_cols=device_array(pc, jnp.int32),
        test_values=device_array(tv, dtype),
        offset=device_array(entries.offset, dtype),
        clip_lo=device_array(lo, dtype),
        clip_hi=device_array(hi, dtype),
        track_rows=device_array(tr, jnp.int32),
        track_cols=device_array(tc, jnp.int32),
    )


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


def padded_dims(problem: GibbsProblem) -> tuple[int, int]:
    """``(m1, m2)`` with the rows padded to a multiple of the device count on a mesh."""
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
    (C, m1), ``col_bias`` (C, m2)); feature-driven biases add ``row_bias_lam`` (C,) and,
    with the factors, ``row_bias_w`` (C, F) (and the same with ``col_``)."""
    out = {k: v for k, v in state.prior_state.items() if k not in problem.link_sites}
    if (
        store_factors and problem.links
    ):  # a feature link's B, from its coordinates in the sweep's state
        from ...priors import macau

        out.update(macau.stored_links(state.prior_state, problem.links, state.key))
    e = problem.entries
    out["theta"] = entries(state, problem, e.track_rows, e.track_cols, "track")
    if problem.learned_tau:
        out["tau"] = state.tau
    # learned cut points; not the per-rating variables (z, w)
    out.update({k: v for k, v in state.lik_state.items() if k not in PER_RATING})
    if problem.biases is not None:
        out["row_bias_var"], out["col_bias_var"] = state.bias_var[:, 0], state.bias_var[:, 1]
    for o in problem.offsets:
        out.update(o.draws(state.offset_state[o.name], store_factors))
    for name, x in state.bias_link.items():  # w as large as a factor's row: with the factors
        if not name.endswith("_wt"):
            out[name] = x
        elif store_factors:
            V = problem.bias_links[f"{name[:3]}/V"]
            out[name[:-1]] = jnp.einsum("fg,cg->cf", V, x)
    if store_factors:
        out["M"], out["N"] = factors(state, problem)
        if problem.biases is not None:
            m1, m2 = problem.dims
            out["row_bias"], out["col_bias"] = state.row_bias[:, :m1], state.col_bias[:, :m2]
    return out


def entries(
    state: GibbsState, problem: GibbsProblem, rows: jax.Array, cols: jax.Array, where=None
) -> jax.Array:
    """``theta[rows, cols]`` of each chain (C, P), the biases included when the model has
    them; with offsets, ``where`` (``"pred"`` or ``"track"``) names the problem's entries
    ``rows, cols`` are, whose offsets are added."""
    t = theta_at(state.M, state.N, rows, cols)
    if problem.biases is not None:
        t = t + state.row_bias[:, rows] + state.col_bias[:, cols]
    if problem.offsets and where is not None:
        t = t + offsets_shift(problem, state.offset_state, where)
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
    if gamma is not None:
        prior_state = {**(prior_state or {}), "gamma": gamma}
    state0 = _prior_start(problem, prior, K, C, prior_state or {})
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
    var0 = problem.biases.init_variance() if problem.biases is not None else 1.0
    lik_state, L = likelihood_start(problem, C, dtype)
    bias_link = {}
    if problem.bias_links:
        from ...offsets import bias_link as bl

        start = bl.link_state(problem.bias_links, dtype)
        bias_link = {k: jnp.broadcast_to(v, (C,) + v.shape) for k, v in start.items()}
    state = GibbsState(
        M=M,
        N=N,
        prior_state=state0,
        tau=jnp.broadcast_to(jnp.asarray(problem.tau, dtype), (C,)),
        row_bias=jnp.zeros((C, m1), dtype),
        col_bias=jnp.zeros((C, m2), dtype),
        bias_var=jnp.full((C, 2), var0, dtype),
        bias_link=bias_link,
        lik_state=lik_state,
        key=keys,
        iteration=jnp.zeros((), jnp.int32),
        stats=_stats_start(problem, C, L, dtype),
        offset_state=offsets_start(problem, C, dtype),
    )
    return place(state, problem)


def _stats_start(problem: GibbsProblem, C: int, L: int, dtype) -> RunStats:
    """The accumulators at the start: zero sums, NaN RMSE traces, no failure, no switch."""
    P = problem.entries.pred_rows.shape[0]
    T = problem.schedule.num_total if problem.has_test else 0
    return RunStats(
        pred_sum=jnp.zeros((C, P), dtype),
        pred_sq=jnp.zeros((C, P), dtype),
        num_kept=jnp.zeros((), jnp.int32),
        rmse_draw=jnp.full((C, T), jnp.nan, dtype),
        rmse_mean=jnp.full((C, T), jnp.nan, dtype),
        failure=jnp.full((C, 3), -1, jnp.int32),
        proba_sum=jnp.zeros((C, P, L), dtype),
        switches=jnp.zeros((C, 2), jnp.int32),
    )


def _prior_start(problem: GibbsProblem, prior: Prior, K: int, C: int, overrides: dict) -> dict:
    """The prior's variables at the start, (C, ...) each: its
    :meth:`~bmczoo.priors.Prior.gibbs_state` (and link state), ``overrides`` replacing them."""
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
    for name, value in overrides.items():
        if name not in state0:
            raise ValueError(
                f"{prior.name} has no variable {name!r}; its variables are {', '.join(state0)}"
            )
        state0[name] = jnp.broadcast_to(jnp.asarray(value, dtype), state0[name].shape)
    return state0


#: a likelihood's per-rating variables in ``GibbsState.lik_state`` (not stored as draws)
PER_RATING = ("z", "w")

#: state fields whose axis 1 holds the rows of M / of N (padded and sharded on a mesh)
_ROW_FIELDS = {"M": 0, "row_bias": 0, "N": 1, "col_bias": 1}


def place(state: GibbsState, problem: GibbsProblem) -> GibbsState:
    """Put a state with unpadded ``M`` (C, m1, K), ``N`` (C, m2, K) (and biases) where
    ``problem`` runs: unchanged on one device; on a mesh, the rows padded and sharded, the
    rest replicated (used by :func:`init` and to restore checkpoints)."""
    if problem.mesh is None:
        return state
    padded = padded_dims(problem)
    rep = sh.replicated(problem.mesh)
    out = {}
    for f in GibbsState._fields:
        x = getattr(state, f)
        if f in _ROW_FIELDS:
            x = (
                sh.pad_rows(x, padded[_ROW_FIELDS[f]])
                if x.ndim == 3
                else pad_vec(x, padded[_ROW_FIELDS[f]])
            )
            spec = jax.sharding.PartitionSpec(None, sh.AXIS, *([None] * (x.ndim - 2)))
            out[f] = sh.put(x, jax.sharding.NamedSharding(problem.mesh, spec))
        else:
            out[f] = jax.tree.map(lambda a: sh.put(a, rep), x)
    return GibbsState(**out)


def pad_vec(x: jax.Array, m_pad: int) -> jax.Array:
    """(C, m) -> (C, m_pad), zero padding rows."""
    return jnp.pad(x, ((0, 0), (0, m_pad - x.shape[1])))
