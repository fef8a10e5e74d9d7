"""Geweke (2004) joint-distribution tests of the conjugate Gibbs sampler.

On a tiny problem (6 x 5 matrix, 15 observed entries, row 5 empty, K = 2, tau = 1) the
joint distribution of ``(gamma, M, N, Y)`` is simulated in two ways:

* marginal-conditional: ``gamma ~ prior``, ``M, N | gamma``, ``Y | M, N`` drawn directly
  with numpy from the model of docs/algorithms.md, "The model" (iid draws);
* successive-conditional: ``C`` independent chains that alternate one Gibbs sweep
  (:func:`bmczoo.inference.gibbs.sweep`, with a problem whose rating values are the
  chain's current ``Y``) with a fresh draw ``Y | theta``.  Each chain starts from an
  exact draw of the joint, so if the sweep leaves ``p(theta | Y)`` invariant every state
  of every chain is an exact joint draw.

The two must agree on the expectation of every test function (gamma sorted, log gamma,
gamma^2, theta and theta^2 at observed and unobserved entries, ``S``, ``sum Y^2``,
``sum (Y - theta)^2``, ``sum Y theta``).

Standard errors: the chains are independent and start from iid joint draws, so their
time averages are iid across chains under the null hypothesis; the successive-conditional
SE is the sd of the ``C`` chain means over ``sqrt(C)`` (exact, no batch-means or spectral
approximation needed), the marginal-conditional SE is the iid SE.  Every test asserts
``|z| < z_crit`` for all ``F`` test functions, with ``z_crit`` the Bonferroni
threshold for a familywise level of 1% (two-sided), i.e. ``Phi^-1(1 - 0.01 / (2F))``.
All seeds are fixed, so the outcome is deterministic.

That the machinery has power is itself tested: a sweep whose discrete or inverse-gamma
conditional uses ``d`` instead of ``d/2``, a sweep with ``tau`` doubled, and the paper's
(wrong) gamma-prior conditional (inverse Gaussian on ``gamma_h`` instead of ``1/gamma_h``)
are all detected (``max |z| > 2 z_crit``).  The default suite runs the four priors, the
discrete ``d`` bug and the doubled ``tau``; ``-m slow`` adds the other two and a run with
ten times the draws.

``test_model_prior_predictive_matches_direct_simulation`` checks the other way round that
the NumPyro model (``observed=False``, via ``Predictive``) samples the joint that the
direct simulator draws from.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.inference.settings import SweepOptions

from ._geweke import FAMILYWISE_ALPHA, bonferroni_z, run_chains, with_ratings, z_scores

pytestmark = pytest.mark.usefixtures("x64")

M1, M2, K, TAU = 6, 5, 2, 1.0
D = M1 + M2


def _pattern():
    """15 observed entries in rows 0..4 (row 5 has no rating: a cold-start row)."""
    rng = np.random.default_rng(2024)
    keys = np.sort(rng.choice(5 * M2, size=15, replace=False))
    rows, cols = np.divmod(keys, M2)
    return rows.astype(np.int32), cols.astype(np.int32)


ROWS, COLS = _pattern()
N_OBS = ROWS.size
_observed = set(zip(ROWS.tolist(), COLS.tolist()))
_unobs = [(i, j) for i in range(5) for j in range(M2) if (i, j) not in _observed]
# theta is a test function at two observed and two unobserved entries (one in the empty row)
ENTRIES = [(int(ROWS[0]), int(COLS[0])), (int(ROWS[-1]), int(COLS[-1])), _unobs[0], (5, 0)]
E_ROWS = np.array([e[0] for e in ENTRIES], np.int32)
E_COLS = np.array([e[1] for e in ENTRIES], np.int32)

PRIORS = {
    "fixed": bmc.priors.Fixed(1.0),
    # a = 6 (not 3) so that E[gamma^4] and hence Var(theta^2) are finite: with a = 3 the
    # theta^2 and sum-Y^2 test functions have infinite variance and their z-scores mean nothing
    "inverse-gamma": bmc.priors.InverseGamma(6.0, 5.0),
    # prior mean (d + 1) / beta^2 = 1 for d = 11
    "gamma": bmc.priors.Gamma(beta=math.sqrt(12.0)),
    "discrete": bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3),
}


# --------------------------------------------------------------------------- test functions
def _gamma_functions(prior) -> list[str]:
    if isinstance(prior, bmc.priors.Fixed):
        return []
    if isinstance(prior, bmc.priors.Discrete):
        return ["gamma_min", "gamma_max"]  # anything else is a linear function of these
    return ["gamma_min", "gamma_max", "sum_log_gamma", "sum_gamma^2"]


def _names(prior) -> list[str]:
    names = list(_gamma_functions(prior))
    for e in ENTRIES:
        names += [f"theta{e}", f"theta{e}^2"]
    names += ["S", "sum_Y^2", "sum_(Y-theta)^2", "sum_Y*theta"]
    return names


def geweke_functions(prior, gamma, M, N, Y, xp=np):
    """Test functions of a batch of draws: gamma (..., K), M (..., m1, K), N (..., m2, K),
    Y (..., n) -> (..., F).  ``xp`` is ``numpy`` or ``jax.numpy``."""
    gs = xp.sort(gamma, axis=-1)
    table = {
        "gamma_min": lambda: gs[..., 0],
        "gamma_max": lambda: gs[..., -1],
        "sum_log_gamma": lambda: xp.sum(xp.log(gamma), axis=-1),
        "sum_gamma^2": lambda: xp.sum(gamma**2, axis=-1),
    }
    out = [table[n]() for n in _gamma_functions(prior)]
    th = xp.sum(M[..., E_ROWS, :] * N[..., E_COLS, :], axis=-1)
    for e in range(len(ENTRIES)):
        out += [th[..., e], th[..., e] ** 2]
    theta_obs = xp.sum(M[..., ROWS, :] * N[..., COLS, :], axis=-1)
    out += [
        xp.sum(M**2, axis=(-2, -1)) + xp.sum(N**2, axis=(-2, -1)),
        xp.sum(Y**2, axis=-1),
        xp.sum((Y - theta_obs) ** 2, axis=-1),
        xp.sum(Y * theta_obs, axis=-1),
    ]
    return xp.stack(out, axis=-1)


# --------------------------------------------------------------------------- simulators
def _prior_gamma(prior, size: int, rng: np.random.Generator) -> np.ndarray:
    """iid draws of gamma (size, K) from the prior, written from docs/algorithms.md (not bmczoo)."""
    shape = (size, K)
    if isinstance(prior, bmc.priors.Fixed):
        return np.full(shape, prior.gamma)
    if isinstance(prior, bmc.priors.InverseGamma):
        return prior.b / rng.gamma(prior.a, 1.0, shape)
    if isinstance(prior, bmc.priors.Gamma):
        return rng.gamma(0.5 * (D + 1), 1.0 / (0.5 * prior.beta**2), shape)
    if isinstance(prior, bmc.priors.Discrete):
        return np.where(rng.random(shape) < prior.p, prior.C, prior.eps)
    raise TypeError(prior)


def joint_draws(prior, size: int, seed: int, tau: float = TAU):
    """``size`` iid draws of ``(gamma, M, N, Y)`` from prior x likelihood (numpy float64)."""
    rng = np.random.default_rng(seed)
    gamma = _prior_gamma(prior, size, rng)
    sd = np.sqrt(gamma)[:, None, :]
    M = rng.standard_normal((size, M1, K)) * sd
    N = rng.standard_normal((size, M2, K)) * sd
    theta_obs = np.sum(M[:, ROWS] * N[:, COLS], axis=-1)
    Y = theta_obs + rng.standard_normal((size, N_OBS)) / math.sqrt(tau)
    return gamma, M, N, Y


def marginal_conditional(prior, size: int, seed: int) -> np.ndarray:
    """Test functions of ``size`` iid joint draws: (size, F)."""
    return geweke_functions(prior, *joint_draws(prior, size, seed))


def _geweke_chains(
    problem, row_order, col_order, keys, gamma, M, N, Y, *, prior, sampler_prior, num_steps
):
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)
    y_sd = 1.0 / math.sqrt(TAU)

    def one_step(carry, _):
        key, gamma, M, N, Y = carry
        key, k_sweep, k_y = jax.random.split(key, 3)
        # the problem built from this chain's current Y: only the CSR values change
        prob = with_ratings(problem, Y, row_order, col_order)
        state = gibbs.init(
            k_sweep[None], prob, sampler_prior, K, gamma=gamma[None], M=M[None], N=N[None]
        )
        state = gibbs.sweep(state, prob, sampler_prior)
        gamma, M, N = state.gamma[0], state.M[0], state.N[0]
        # (gamma, M, N) after the sweep with the Y it conditioned on is a joint draw under
        # H0; so is the pair after refreshing Y, but there Y - theta is fresh noise whatever
        # the sweep did, so the informative pairing is this one
        f = geweke_functions(prior, gamma, M, N, Y, xp=jnp)
        theta_obs = jnp.sum(M[rows] * N[cols], axis=-1)
        Y = theta_obs + y_sd * jax.random.normal(k_y, theta_obs.shape, theta_obs.dtype)
        return (key, gamma, M, N, Y), f

    return run_chains(one_step, (keys, gamma, M, N, Y), num_steps)


def successive_conditional(
    prior,
    sampler_prior=None,
    *,
    num_chains: int,
    num_steps: int,
    seed: int,
    sampler_tau: float = TAU,
    overrelax: float = 0.0,
) -> np.ndarray:
    """Test functions along ``num_chains`` Geweke chains: (num_chains, num_steps, F).

    ``sampler_prior`` / ``sampler_tau`` are what the Gibbs sweep is given (deliberately
    wrong variants for the power checks); ``Y | theta`` is always drawn with ``TAU``.
    """
    sampler_prior = prior if sampler_prior is None else sampler_prior
    template = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
    problem = gibbs.build_problem(
        template,
        sampler_tau,
        dtype=jnp.float64,
        options=SweepOptions(column_moves=False, overrelax=overrelax),
    )
    init = joint_draws(prior, num_chains, seed + 1)
    keys = jax.random.split(jax.random.key(seed), num_chains)
    out = _geweke_chains(
        problem,
        jnp.asarray(template.row_view.order),
        jnp.asarray(template.col_view.order),
        keys,
        *(jnp.asarray(x) for x in init),
        prior=prior,
        sampler_prior=sampler_prior,
        num_steps=num_steps,
    )
    return np.asarray(out)


@dataclasses.dataclass
class GewekeResult:
    names: list[str]
    z: np.ndarray
    z_crit: float
    succ_mean: np.ndarray
    marg_mean: np.ndarray

    @property
    def max_abs_z(self) -> float:
        return float(np.max(np.abs(self.z)))

    def report(self) -> str:
        lines = [
            f"z_crit = {self.z_crit:.3f} (familywise {FAMILYWISE_ALPHA}, F = {len(self.names)})"
        ]
        for n, z, a, b in zip(self.names, self.z, self.succ_mean, self.marg_mean):
            flag = "  <--" if abs(z) >= self.z_crit else ""
            lines.append(f"  {n:>22s}: z = {z:+8.3f}  successive {a:+.5f}  marginal {b:+.5f}{flag}")
        return "\n".join(lines)


def geweke(
    prior,
    sampler_prior=None,
    *,
    num_chains=200,
    num_steps=500,
    num_marginal=100_000,
    seed=0,
    sampler_tau=TAU,
    overrelax=0.0,
):
    succ = successive_conditional(
        prior,
        sampler_prior,
        num_chains=num_chains,
        num_steps=num_steps,
        seed=seed,
        sampler_tau=sampler_tau,
        overrelax=overrelax,
    )
    marg = marginal_conditional(prior, num_marginal, seed + 2)
    z, z_crit = z_scores(succ, marg)
    names = _names(prior)
    assert len(names) == z.size  # no test function is constant
    return GewekeResult(names, z, z_crit, succ.mean(axis=(0, 1)), marg.mean(axis=0))


# --------------------------------------------------------------------------- deliberately wrong samplers
class _ColumnScaleHooks:
    """The Gibbs engine's generic hooks as a column-scale prior has them (those of
    ``bmc.priors.Prior``), for the fakes below, which are not ``Prior`` subclasses."""

    gibbs_state = bmc.priors.Prior.gibbs_state
    row_priors = bmc.priors.Prior.row_priors
    factor_stats = bmc.priors.Prior.factor_stats
    gibbs_update = bmc.priors.Prior.gibbs_update

    def init_gamma(self, K, d, dtype=jnp.float32):
        return jnp.ones((K,), dtype)


@dataclasses.dataclass(frozen=True)
class DoubledD(_ColumnScaleHooks):
    """Delegates to ``base`` but passes ``2d`` for ``d``: the inverse-gamma conditional
    then has shape ``a + d`` instead of ``a + d/2`` (the "d instead of d/2" bug).  Not a
    ``Prior`` subclass, so it never enters the ``get_prior`` registry."""

    base: bmc.priors.Prior

    def sample_conditional(self, key, S, d):
        return self.base.sample_conditional(key, S, 2 * d)

    def row_prior(self, gamma):
        return self.base.row_prior(gamma)


@dataclasses.dataclass(frozen=True)
class PaperGammaConditional(_ColumnScaleHooks):
    """The paper's table of conditionals for the gamma prior: the inverse Gaussian put on
    ``gamma_h`` itself (``gamma_h ~ IG(beta / sqrt(S_h), beta^2)``) instead of ``1/gamma_h``."""

    beta: float

    def row_prior(self, gamma):
        return 1.0 / gamma

    def sample_conditional(self, key, S, d):
        lam = self.beta**2
        return lam * jax.random.wald(key, (self.beta / jnp.sqrt(S)) / lam, S.shape, dtype=S.dtype)


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", list(PRIORS))
def test_geweke_joint_distribution(name):
    res = geweke(PRIORS[name])
    assert res.max_abs_z < res.z_crit, f"Geweke test failed for {name}:\n{res.report()}"


@pytest.mark.parametrize(
    "name", [n if n == "discrete" else pytest.param(n, marks=pytest.mark.slow) for n in PRIORS]
)
def test_geweke_joint_distribution_overrelaxed(name):
    """The over-relaxed row updates (rho = -0.7, the setting recommended for mixing) leave
    the joint distribution invariant too."""
    res = geweke(PRIORS[name], overrelax=-0.7)
    assert res.max_abs_z < res.z_crit, (
        f"Geweke test failed for {name} (overrelax=-0.7):\n{res.report()}"
    )


def test_geweke_detects_discrete_d_instead_of_d_over_2():
    prior = PRIORS["discrete"]
    res = geweke(prior, DoubledD(prior), num_chains=100, num_steps=200, num_marginal=50_000)
    assert res.max_abs_z > 2 * res.z_crit, (
        f"wrong discrete conditional not detected:\n{res.report()}"
    )


def test_geweke_detects_doubled_tau():
    prior = PRIORS["fixed"]
    # same shapes and prior as test_geweke_joint_distribution[fixed]: reuses its compiled chains
    res = geweke(prior, sampler_tau=2 * TAU)
    assert res.max_abs_z > 2 * res.z_crit, f"doubled tau not detected:\n{res.report()}"


@pytest.mark.slow
def test_geweke_detects_inverse_gamma_d_instead_of_d_over_2():
    prior = PRIORS["inverse-gamma"]
    res = geweke(prior, DoubledD(prior), num_chains=100, num_steps=200, num_marginal=50_000)
    assert res.max_abs_z > 2 * res.z_crit, f"wrong conditional not detected:\n{res.report()}"


@pytest.mark.slow
def test_geweke_detects_paper_gamma_conditional():
    """The paper's erratum (inverse Gaussian on gamma_h, not on 1/gamma_h) is detected."""
    prior = PRIORS["gamma"]
    res = geweke(
        prior, PaperGammaConditional(prior.beta), num_chains=100, num_steps=200, num_marginal=50_000
    )
    assert res.max_abs_z > 2 * res.z_crit, (
        f"paper's gamma conditional not detected:\n{res.report()}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PRIORS))
def test_geweke_joint_distribution_long(name):
    """Ten times the draws of the default test (SE about 3x smaller), other seeds."""
    res = geweke(PRIORS[name], num_chains=1000, num_steps=1000, num_marginal=1_000_000, seed=7)
    assert res.max_abs_z < res.z_crit, f"Geweke test failed for {name}:\n{res.report()}"


# --------------------------------------------------------------------------- the model agrees with the simulator
@pytest.mark.parametrize(
    "name", [n if n == "discrete" else pytest.param(n, marks=pytest.mark.slow) for n in PRIORS]
)
def test_model_prior_predictive_matches_direct_simulation(name):
    """The NumPyro model with ``observed=False`` (via ``Predictive``) draws the same joint
    as the direct simulator used above (for the discrete prior the model integrates gamma
    out and its ``"gamma"`` site is ``E[gamma | M, N]``, whose mean is the prior mean)."""
    from numpyro.infer import Predictive

    prior = PRIORS[name]
    ratings = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
    num = 40_000
    pred = Predictive(bmc.models.matrix_completion, num_samples=num)(
        jax.random.key(11), ratings, K, prior, lam=N_OBS * TAU / 2.0, observed=False
    )
    gamma, M, N, Y = (np.asarray(pred[s], np.float64) for s in ("gamma", "M", "N", "obs"))
    assert gamma.shape == (num, K) and M.shape == (num, M1, K) and N.shape == (num, M2, K)
    assert Y.shape == (num, N_OBS)
    fixed = bmc.priors.Fixed(1.0)  # test functions not involving gamma
    ref = joint_draws(prior, 200_000, seed=5)
    a, b = geweke_functions(fixed, gamma, M, N, Y), geweke_functions(fixed, *ref)
    if isinstance(prior, bmc.priors.Fixed):
        assert np.all(gamma == prior.gamma)
    else:
        a = np.column_stack([gamma.sum(axis=1), a])
        b = np.column_stack([ref[0].sum(axis=1), b])
    z = (a.mean(0) - b.mean(0)) / np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    z_crit = bonferroni_z(z.size)
    assert np.max(np.abs(z)) < z_crit, f"{name}: z = {np.round(z, 2)}, z_crit = {z_crit:.2f}"


def test_geweke_detects_overrelaxation_without_the_noise_correction(monkeypatch):
    """Power check: an over-relaxed update that keeps the full noise (sqrt(1 - rho^2)
    omitted) inflates the conditional variance by 1 + rho^2: the test must see it."""
    from bmczoo import linalg as kernels
    from bmczoo.inference.gibbs import rows

    def wrong(P, rhs, z, x, rho):
        L = kernels.cholesky_rows(P)
        LTx = jnp.einsum("...kj,...k->...j", L, x)
        return kernels._tri(L, (1.0 - rho) * kernels._tri(L, rhs, False) + z + rho * LTx, True)

    monkeypatch.setattr(rows, "draw_rows", wrong)
    res = geweke(
        PRIORS["discrete"], num_chains=100, num_steps=201, num_marginal=50_000, overrelax=-0.7
    )
    assert res.max_abs_z > 2 * res.z_crit, f"wrong over-relaxation not detected:\n{res.report()}"
