"""Simulation-based calibration (Talts, Betancourt, Simpson, Vehtari & Gelman 2018) of the
conjugate Gibbs sampler.

For each of ``R`` replications: draw ``(prior variables, M, N, tau, Y)`` from the model,
run one Gibbs chain on that ``Y`` from the sampler's default start, keep ``L`` thinned
draws after a warm-up, and record the rank of each statistic's true value among its ``L``
draws (0..L; ties, as for the integer active-column count, broken uniformly at random).
If the sampler draws from the posterior, each rank is uniform on ``0..L`` (the data
averaged over the prior make the truth one more draw from the posterior).

All replications run in one compiled program: the Gibbs kernel's pure functions
(:func:`bmczoo.inference.gibbs.init`, :func:`~bmczoo.inference.gibbs.sweep`) with one chain
per replication, ``jax.vmap``-ed over replications; the problem differs between
replications only in its rating values (the CSR ``values``, and ``sum_sq`` for a learned
noise precision), which are replaced inside the map as in the Geweke tests.

The test: the ranks of each statistic in ``B`` equal bins, Pearson's chi-square against
the uniform law (``B - 1`` degrees of freedom), Bonferroni over the statistics: a run
passes when every p-value is above ``alpha / S``.

The truth is drawn through NumPyro (``Predictive``) from the model's own components: the
prior's sample statements (for a column-scale prior ``gamma`` drawn, then ``M, N | gamma``
as in :meth:`bmczoo.priors.Prior.sample_latents`, so that the discrete prior's slab
indicators are known; the Normal-Wishart prior's ``Lambda, mu, M, N``), the likelihood's
global sites (a learned ``tau``) and its ``obs``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.infer import Predictive
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.settings import SweepOptions


@dataclasses.dataclass(frozen=True)
class SBCDesign:
    """A small problem for SBC: an ``m1 x m2`` matrix with ``fraction`` of its entries
    observed (a fixed pattern), latent dimension ``K``, and the theta entries whose ranks
    are tested (``num_entries`` observed and as many unobserved)."""

    m1: int = 20
    m2: int = 20
    K: int = 3
    fraction: float = 0.3
    num_entries: int = 2
    pattern_seed: int = 0

    def pattern(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.pattern_seed)
        n = int(round(self.fraction * self.m1 * self.m2))
        keys = np.sort(rng.choice(self.m1 * self.m2, size=n, replace=False))
        rows, cols = np.divmod(keys, self.m2)
        return rows.astype(np.int32), cols.astype(np.int32)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = self.pattern()
        observed = set(zip(rows.tolist(), cols.tolist()))
        rng = np.random.default_rng(self.pattern_seed + 1)
        obs = rng.choice(rows.size, size=self.num_entries, replace=False)
        unobs: list[tuple[int, int]] = []
        while len(unobs) < self.num_entries:
            e = (int(rng.integers(self.m1)), int(rng.integers(self.m2)))
            if e not in observed and e not in unobs:
                unobs.append(e)
        er = np.concatenate([rows[obs], [u[0] for u in unobs]]).astype(np.int32)
        ec = np.concatenate([cols[obs], [u[1] for u in unobs]]).astype(np.int32)
        return er, ec

    def template(self) -> bmc.RatingData:
        rows, cols = self.pattern()
        return bmc.RatingData(rows, cols, np.zeros(rows.size), (self.m1, self.m2))


def _joint_model(ratings: bmc.RatingData, K: int, prior, likelihood):
    """The model of :func:`bmczoo.models.matrix_completion` with ``obs`` sampled and, for a
    column-scale prior, ``gamma`` drawn (not integrated out): the prior's own
    ``sample_gamma`` followed by ``M, N | gamma`` (the base ``Prior.sample_latents``)."""
    m1, m2 = ratings.shape
    if prior.has_column_scales:
        _, M, N = bmc.priors.Prior.sample_latents(prior, m1, m2, K)
    else:
        _, M, N = prior.sample_latents(m1, m2, K)
    params = likelihood.sample_params()
    rows, cols = jnp.asarray(ratings.rows), jnp.asarray(ratings.cols)
    with numpyro.plate("ratings", ratings.n):
        likelihood.sample_obs(jnp.sum(M[rows] * N[cols], axis=-1), ratings.n, None, **params)


def prior_draws(design: SBCDesign, prior, likelihood, num: int, seed: int) -> dict:
    """``num`` joint draws from the model (float64 numpy arrays, leading axis ``num``)."""
    ratings = design.template()
    pred = Predictive(_joint_model, num_samples=num)(
        jax.random.key(seed), ratings, design.K, prior, likelihood
    )
    return {k: np.asarray(v, np.float64) for k, v in pred.items()}


def _statistic_names(design: SBCDesign, prior, likelihood) -> list[str]:
    er, ec = design.entries()
    names = [f"theta({r},{c})" for r, c in zip(er, ec)]
    if isinstance(prior, bmc.priors.Discrete):
        names.append("active columns")
    elif prior.has_column_scales and not isinstance(prior, bmc.priors.Fixed):
        names.append("sum log gamma")
    elif not prior.has_column_scales:
        names.append("log det Lambda_M")
    if getattr(likelihood, "learned", False):
        names.append("tau")
    return names


def _statistics(prior, likelihood, er, ec, M, N, prior_state, tau):
    """The tested statistics of one state (no chain axis): theta at the entries, the
    prior's summary (active-column count, sum log gamma, log det Lambda_M), tau if learned."""
    out = list(jnp.sum(M[er] * N[ec], axis=-1))
    if isinstance(prior, bmc.priors.Discrete):
        out.append(jnp.sum(prior_state["gamma"] > 0.5 * (prior.C + prior.eps)).astype(M.dtype))
    elif prior.has_column_scales and not isinstance(prior, bmc.priors.Fixed):
        out.append(jnp.sum(jnp.log(prior_state["gamma"])))
    elif not prior.has_column_scales:
        out.append(jnp.linalg.slogdet(prior_state["Lambda_M"])[1])
    if getattr(likelihood, "learned", False):
        out.append(tau)
    return jnp.stack(out)


@functools.partial(
    jax.jit,
    static_argnames=("prior", "likelihood", "num_warmup", "num_draws", "thin", "K"),
    compiler_options={"xla_backend_optimization_level": 0},
)
def _sbc_chains(
    problem,
    row_order,
    col_order,
    er,
    ec,
    keys,
    Y,
    *,
    prior,
    likelihood,
    K,
    num_warmup,
    num_draws,
    thin,
):
    """Statistics of ``num_draws`` thinned draws of one chain per replication:
    (R, num_draws, S)."""
    learned = getattr(likelihood, "learned", False)

    def replication(key, y):
        prob = dataclasses.replace(
            problem,
            rows=problem.rows._replace(values=y[row_order]),
            cols=problem.cols._replace(values=y[col_order]),
            **({"sum_sq": jnp.sum(y**2)} if learned else {}),
        )
        state = gibbs.init(key[None], prob, prior, K)

        def advance(state, num):
            def one(_, s):  # the iteration counter drives the annealed switch's schedule
                return gibbs.sweep(s, prob, prior)._replace(iteration=s.iteration + 1)

            return jax.lax.fori_loop(0, num, one, state)

        state = advance(state, num_warmup)

        def draw(state, _):
            state = advance(state, thin)
            ps = jax.tree.map(lambda x: x[0], state.prior_state)
            return state, _statistics(
                prior, likelihood, er, ec, state.M[0], state.N[0], ps, state.tau[0]
            )

        state, out = jax.lax.scan(draw, state, None, length=num_draws)
        return out, state.stats.failure[0]

    return jax.vmap(replication)(keys, Y)


def clear_compiled() -> None:
    """Forget the traced SBC program (a monkeypatched kernel function must be traced
    afresh, and its program not reused once the patch is undone)."""
    _sbc_chains.clear_cache()


@dataclasses.dataclass
class SBCResult:
    """Ranks (R, S) in ``0..L`` of each statistic, their chi-square p-values and the
    Bonferroni verdict at familywise level ``alpha``."""

    names: list[str]
    ranks: np.ndarray
    num_draws: int
    num_bins: int
    alpha: float
    chi2: np.ndarray
    p_values: np.ndarray
    lag1_autocorr: np.ndarray

    @property
    def threshold(self) -> float:
        return self.alpha / len(self.names)

    @property
    def uniform(self) -> bool:
        return bool(np.all(self.p_values > self.threshold))

    def histogram(self) -> np.ndarray:
        return bin_ranks(self.ranks, self.num_draws, self.num_bins)

    def report(self) -> str:
        R = self.ranks.shape[0]
        lines = [
            f"SBC: {R} replications, {self.num_draws} draws each, ranks in {self.num_bins} bins; "
            f"reject a statistic when p < {self.alpha} / {len(self.names)} = {self.threshold:.2g}"
        ]
        for n, c, p, h, a in zip(
            self.names, self.chi2, self.p_values, self.histogram().T, self.lag1_autocorr
        ):
            flag = "  <-- not uniform" if p <= self.threshold else ""
            lines.append(
                f"  {n:>18s}: chi2 {c:7.1f}  p {p:.2e}  lag-1 autocorr of draws {a:+.2f}  "
                f"bins {h.tolist()}{flag}"
            )
        return "\n".join(lines)


def bin_ranks(ranks: np.ndarray, num_draws: int, num_bins: int) -> np.ndarray:
    """Counts (B, S) of ranks (R, S) in ``0..num_draws`` over ``B`` bins of equal width
    (``num_draws + 1`` must be a multiple of ``B``)."""
    width = (num_draws + 1) // num_bins
    return np.stack([np.bincount(r // width, minlength=num_bins) for r in ranks.T], axis=1)


def _ranks(draws: np.ndarray, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rank (R, S) of ``truth`` (R, S) among ``draws`` (R, L, S): the number of draws below
    it plus a uniform share of the ties (exact for a discrete statistic)."""
    below = np.sum(draws < truth[:, None, :], axis=1)
    ties = np.sum(draws == truth[:, None, :], axis=1)
    return below + np.floor(rng.random(below.shape) * (ties + 1)).astype(np.int64)


def _lag1(draws: np.ndarray) -> np.ndarray:
    """Mean over replications of the lag-1 autocorrelation of the kept draws (per
    statistic; NaN-free: constant series count as 0)."""
    x = draws - draws.mean(axis=1, keepdims=True)
    num = np.sum(x[:, 1:] * x[:, :-1], axis=1)
    den = np.sum(x * x, axis=1)
    return np.mean(np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0), axis=0)


def run_sbc(
    prior,
    likelihood=None,
    *,
    design: SBCDesign = SBCDesign(),
    num_replications: int = 300,
    num_warmup: int = 100,
    num_draws: int = 99,
    thin: int = 3,
    num_bins: int = 10,
    alpha: float = 0.01,
    column_moves: bool | None = None,
    anneal_steps: int = 0,
    anneal_every: int = 1,
    seed: int = 0,
    sampler_prior=None,
    sampler_likelihood=None,
) -> SBCResult:
    """SBC of the Gibbs sampler (float64; call under ``jax.enable_x64``).

    ``column_moves=None``: the moves where the prior has one, inside the sweep and on the
    prior's schedule (``bmc.fit``'s default);
    ``anneal_steps``/``anneal_every``: the annealed spike/slab switch.  ``sampler_prior``
    and ``sampler_likelihood`` (default ``prior``, ``likelihood``) are what the sampler is
    given (wrong variants for the power checks); the truth always comes from ``prior`` and
    ``likelihood``.  ``seed`` fixes the truth draws (``seed``), the
    chains' keys (``seed + 1``) and the tie-breaking (``seed + 2``).
    """
    likelihood = bmc.likelihoods.Tempered() if likelihood is None else likelihood
    sampler_prior = prior if sampler_prior is None else sampler_prior
    sampler_likelihood = likelihood if sampler_likelihood is None else sampler_likelihood
    if (num_draws + 1) % num_bins:
        raise ValueError(
            f"num_draws + 1 = {num_draws + 1} must be a multiple of num_bins = {num_bins}"
        )
    moves = sampler_prior.has_column_move if column_moves is None else column_moves
    template = design.template()
    er, ec = design.entries()
    tau0 = likelihood.precision(template.n)
    problem = gibbs.build_problem(
        template,
        tau0,
        dtype=jnp.float64,
        likelihood=sampler_likelihood,
        options=SweepOptions(
            column_moves=bool(moves), anneal_steps=anneal_steps, anneal_every=anneal_every
        ),
        prior=sampler_prior,  # its schedule of moves (Prior.column_moves_every)
    )
    truth = prior_draws(design, prior, likelihood, num_replications, seed)
    ps_true = {k: truth[k] for k in ("gamma", "Lambda_M") if k in truth}
    tau_true = truth["tau"] if "tau" in truth else np.full(num_replications, tau0)
    t_stats = np.asarray(
        jax.vmap(lambda M, N, ps, t: _statistics(prior, likelihood, er, ec, M, N, ps, t))(
            jnp.asarray(truth["M"]),
            jnp.asarray(truth["N"]),
            jax.tree.map(jnp.asarray, ps_true),
            jnp.asarray(tau_true),
        )
    )
    keys = jax.random.split(jax.random.key(seed + 1), num_replications)
    draws, failure = _sbc_chains(
        problem,
        jnp.asarray(template.row_view.order),
        jnp.asarray(template.col_view.order),
        jnp.asarray(er),
        jnp.asarray(ec),
        keys,
        jnp.asarray(truth["obs"]),
        prior=sampler_prior,
        likelihood=sampler_likelihood,
        K=design.K,
        num_warmup=num_warmup,
        num_draws=num_draws,
        thin=thin,
    )
    draws, failure = np.asarray(draws), np.asarray(failure)
    if np.any(failure[:, 0] >= 0) or not np.all(np.isfinite(draws)):
        raise FloatingPointError(
            f"non-finite draws in {int(np.sum(failure[:, 0] >= 0))} replications"
        )
    ranks = _ranks(draws, t_stats, np.random.default_rng(seed + 2))
    counts = bin_ranks(ranks, num_draws, num_bins)
    chi2, p = stats.chisquare(counts, axis=0)
    return SBCResult(
        names=_statistic_names(design, prior, likelihood),
        ranks=ranks,
        num_draws=num_draws,
        num_bins=num_bins,
        alpha=alpha,
        chi2=np.asarray(chi2),
        p_values=np.asarray(p),
        lag1_autocorr=_lag1(draws),
    )
