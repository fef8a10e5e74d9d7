"""Simulation-based calibration (Talts et al. 2018) of the tensor (CP) Gibbs sweep with the
discrete prior's column moves and spike/slab swaps: the posterior of the CP rank (issue 56).

Design: a 6 x 5 x 4 array with half its entries observed (a fixed pattern), K = 3,
``Discrete(C=1, p=0.4, eps=0.05)`` (every rank 0..3 has prior mass; the spike's columns
carry theta of order ``eps^(3/2)``), known noise sd 0.5 (``Tempered``; a learned ``tau`` in
one ``slow`` run), float64. Per replication ``gamma``, ``U`` and ``y`` are drawn from the
model with numpy (seeded), and one chain runs :func:`bmczoo.inference.tensor.sweep` with
``moves=True`` (the column moves with each mode's column integrated out in turn, the
spike/slab swaps) from :func:`~bmczoo.inference.tensor.init` (every column in the slab);
after a warm-up the statistics of thinned draws are kept. The replications are
``jax.vmap``-ed (one chain each: the problem differs only in its values), so a run is one
compiled program.

Statistics: the CP rank (the number of slab columns; its ties broken uniformly at random,
``_sbc._ranks``), theta at two observed and two unobserved entries, and
``sum_d ||U_d||^2``.  The ranks of the truth among the draws go into 10 equal bins and
a statistic is rejected when its chi-square p-value (9 degrees of freedom) is at most
``alpha / S`` (Bonferroni over the S = 6 statistics, familywise ``alpha = 0.01``): the
tolerance is the test's own, as in ``tests/inference/test_sbc.py`` (whose ``bin_ranks``,
``_ranks``, ``_lag1`` and ``SBCResult`` this reuses).  Seeds are fixed: the outcome is
deterministic.

Runs: a quick one in the default suite (100 replications, 40 warm-up sweeps, 39 draws
every 2 sweeps) and a full one (``slow``: 500 replications, 100 warm-up sweeps, 99 draws
every 3 sweeps).  Power: moves whose rescaled design forgets one of the other modes
(``_design_scale`` returning ``s^(D-2)`` for ``s^(D-1)``, as in the Geweke power check)
must fail, on the CP rank itself, at the quick size; swaps without their proposal
densities (``_log_normal`` as 0) too, with 1000 replications of the quick chains (``slow``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import tensor as T

from .._geweke import FAST_COMPILE
from .._sbc import SBCResult, _lag1, _ranks, bin_ranks

pytestmark = pytest.mark.usefixtures("x64")

SHAPE, K, FRACTION = (6, 5, 4), 3, 0.5
PRIOR = bmc.priors.Discrete(C=1.0, p=0.4, eps=0.05)
NOISE_SD = 0.5
LEARNED = bmc.likelihoods.LearnedNoise(a=6.0, b=1.5)


def _pattern():
    rng = np.random.default_rng(0)
    size = math.prod(SHAPE)
    flat = np.sort(rng.choice(size, round(FRACTION * size), replace=False))
    return np.stack(np.unravel_index(flat, SHAPE), axis=1).astype(np.int32)


IDX = _pattern()
N_OBS = IDX.shape[0]


def _entries():
    """Two observed entries and two unobserved ones."""
    seen = {tuple(r) for r in IDX.tolist()}
    unseen = [e for e in np.ndindex(*SHAPE) if e not in seen]
    return np.array([IDX[0], IDX[N_OBS // 2], unseen[0], unseen[-1]], np.int32)


ENTRIES = _entries()
NAMES = ["CP rank"] + [f"theta{tuple(e.tolist())}" for e in ENTRIES] + ["sum_d |U_d|^2"]


def _theta(U, idx, xp=np):
    t = U[0][..., idx[:, 0], :] * U[1][..., idx[:, 1], :] * U[2][..., idx[:, 2], :]
    return xp.sum(t, axis=-1)


def _statistics(prior, gamma, U, tau=None, xp=np):
    """(..., S): the number of slab columns, theta at ``ENTRIES``, ``sum_d ||U_d||^2``
    and ``tau`` where it is learned."""
    rank = xp.sum(gamma > math.sqrt(prior.C * prior.eps), axis=-1).astype(U[0].dtype)
    th = _theta(U, ENTRIES, xp)
    ss = sum(xp.sum(F * F, axis=(-2, -1)) for F in U)
    last = [ss[..., None]] if tau is None else [ss[..., None], tau[..., None]]
    return xp.concatenate([rank[..., None], th, *last], axis=-1)


def _truth(prior, num, seed, learned=None):
    """``num`` joint draws (numpy, float64): ``gamma_h`` from the two-point prior,
    ``U_d[:, h] ~ N(0, gamma_h I)``, ``y = theta + N(0, 1/tau)`` at ``IDX`` (``tau =
    1/NOISE_SD^2``, or from ``learned``'s ``Gamma(a, rate b)``; ``tau`` returned then)."""
    rng = np.random.default_rng(seed)
    gamma = np.where(rng.random((num, K)) < prior.p, prior.C, prior.eps)
    U = tuple(rng.standard_normal((num, m, K)) * np.sqrt(gamma)[:, None, :] for m in SHAPE)
    z = rng.standard_normal((num, N_OBS))
    if learned is None:
        return gamma, U, _theta(U, IDX) + NOISE_SD * z, None
    tau = rng.gamma(learned.a, 1.0 / learned.b, num)
    return gamma, U, _theta(U, IDX) + z / np.sqrt(tau)[:, None], tau


def _chains(sampler_prior, learned, keys, Y, num_warmup, num_draws, thin):
    """Statistics (R, num_draws, S) of one chain per replication (the sweep with the
    moves, from :func:`bmczoo.inference.tensor.init`), every replication in one compiled
    program (a fresh one per call: a monkeypatched block is traced anew); ``learned``: a
    ``LearnedNoise`` (started at ``1/NOISE_SD^2``) or None (the known noise)."""
    lik = bmc.likelihoods.Tempered(noise_sd=NOISE_SD) if learned is None else learned
    data = bmc.TensorData(IDX, np.zeros(N_OBS), SHAPE)
    problem = T.build_problem(data, 1.0 / NOISE_SD**2, jnp.float64)

    def replication(key, y):
        prob = problem._replace(
            values=y, modes=tuple(c._replace(values=y[c.index]) for c in problem.modes)
        )
        state = T.init(key[None], prob, sampler_prior, K)

        def advance(s, num):
            return jax.lax.fori_loop(
                0, num, lambda _, s: T.sweep(s, prob, sampler_prior, lik, None, True), s
            )

        state = advance(state, num_warmup)

        def draw(s, _):
            s = advance(s, thin)
            first = lambda x: x[0]  # noqa: E731
            tau = None if learned is None else s.tau[0]
            return s, _statistics(PRIOR, s.gamma[0], tuple(map(first, s.U)), tau, jnp)

        return jax.lax.scan(draw, state, None, length=num_draws)[1]

    run = jax.jit(jax.vmap(replication), compiler_options=FAST_COMPILE)
    return np.asarray(run(keys, jnp.asarray(Y)))


def run_tensor_sbc(
    *,
    num_replications,
    num_warmup,
    num_draws,
    thin,
    num_bins=10,
    alpha=0.01,
    seed=0,
    sampler_prior=None,
    learned=None,
):
    """SBC of the CP rank and the other statistics (float64): ``seed`` fixes the truth,
    ``seed + 1`` the chains' keys, ``seed + 2`` the ties' breaking; ``learned`` a
    ``LearnedNoise`` (the truth's ``tau`` from its prior, ``tau`` a statistic) or None."""
    sampler_prior = PRIOR if sampler_prior is None else sampler_prior
    gamma, U, Y, tau = _truth(PRIOR, num_replications, seed, learned)
    truth = _statistics(PRIOR, gamma, U, tau)
    keys = jax.random.split(jax.random.key(seed + 1), num_replications)
    draws = _chains(sampler_prior, learned, keys, Y, num_warmup, num_draws, thin)
    if not np.all(np.isfinite(draws)):
        raise FloatingPointError("non-finite draws")
    ranks = _ranks(draws, truth, np.random.default_rng(seed + 2))
    chi2, p = stats.chisquare(bin_ranks(ranks, num_draws, num_bins), axis=0)
    return SBCResult(
        names=NAMES + ([] if learned is None else ["tau"]),
        ranks=ranks,
        num_draws=num_draws,
        num_bins=num_bins,
        alpha=alpha,
        chi2=np.asarray(chi2),
        p_values=np.asarray(p),
        lag1_autocorr=_lag1(draws),
    )


QUICK = dict(num_replications=100, num_warmup=40, num_draws=39, thin=2)
FULL = dict(num_replications=500, num_warmup=100, num_draws=99, thin=3)


def _wrong_design_scale(log_s, D):
    """A planted error: the other modes' rescaled design as ``s^(D-2)``."""
    return jnp.exp((D - 2) * log_s)


@pytest.mark.parametrize(
    "size", [QUICK, pytest.param(FULL, marks=pytest.mark.slow)], ids=["quick", "full"]
)
def test_tensor_sbc_ranks_are_uniform(size):
    res = run_tensor_sbc(**size)
    print(res.report())  # pytest -s shows the ranks
    assert res.uniform, f"tensor SBC ranks not uniform\n{res.report()}"


def test_tensor_sbc_detects_wrong_design_scale(monkeypatch):
    """The column moves with ``s^(D-2)`` for ``s^(D-1)``: the CP rank's ranks are not
    uniform."""
    monkeypatch.setattr(T.core, "_design_scale", _wrong_design_scale)
    res = run_tensor_sbc(**QUICK)
    print(res.report())
    assert res.p_values[NAMES.index("CP rank")] <= res.threshold, res.report()


@pytest.mark.slow
def test_tensor_sbc_detects_swaps_without_proposal_densities(monkeypatch):
    """The spike/slab swaps accepted on the marginal alone (their proposal densities
    dropped, as in the Geweke power check): the CP rank is not calibrated.  The error is
    small next to the flips' mixing (200 replications of the quick chains: p ~ 0.04; 500 of the full size
    reject at p ~ 2e-4, 800 of the quick chains at p ~ 4e-11): 1000 replications of the
    quick chains."""
    monkeypatch.setattr(T.core, "_log_normal", lambda x, mean, var: jnp.zeros(x.shape[0]))
    res = run_tensor_sbc(**dict(QUICK, num_replications=1000))
    print(res.report())
    assert res.p_values[NAMES.index("CP rank")] <= res.threshold, res.report()


@pytest.mark.slow
def test_tensor_sbc_learned_noise():
    """A learned noise precision (``tau ~ Gamma(6, rate 1.5)``, mean 4: noise sd about
    0.5), ``tau`` a statistic too: quick chains, 200 replications."""
    res = run_tensor_sbc(**dict(QUICK, num_replications=200), learned=LEARNED)
    print(res.report())
    assert res.uniform, f"tensor SBC ranks not uniform\n{res.report()}"
