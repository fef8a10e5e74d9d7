"""Geweke (2004) joint-distribution tests of the Gibbs blocks beyond the paper: the
Normal-Wishart row prior, the learned noise precision and the row/column biases.

As in ``test_geweke.py`` (same tiny problem: 6 x 5, 15 observed entries, row 5 empty,
K = 2): the joint of ``(prior variables, M, N, biases, tau, Y)`` is simulated directly
with numpy/scipy (marginal-conditional) and by independent chains that alternate one
:func:`bmczoo.inference.gibbs.sweep` with a fresh ``Y | theta, tau`` (successive-
conditional), each chain started from an exact joint draw.  Every test function's mean
must agree within a Bonferroni threshold at familywise level 1%; the chain means are iid
across chains under the null, so their standard error is exact.

Hyper-parameters are chosen so that every test function has a finite variance (Wishart
degrees ``nu0 = K + 4``; ``tau ~ Gamma(6, 5)``; bias variances ``InvGamma(6, 5)``).

Power: a Normal-Wishart block that forgets the mean correction of the scatter, a tau
block with shape ``a + n`` instead of ``a + n/2``, and a bias-variance block with shape
``a + m`` instead of ``a + m/2`` are each detected (``max |z| > 2 z_crit``).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.priors.normal_wishart import wishart_draw

pytestmark = pytest.mark.usefixtures("x64")

# the tiny problem of test_geweke.py (6 x 5, 15 observed entries, row 5 empty, K = 2)
from ._geweke import run_chains, with_ratings, z_scores  # noqa: E402
from .test_geweke import COLS, K, M1, M2, N_OBS, ROWS, _unobs  # noqa: E402

TAU_FIXED = 1.0
ENTRIES = [(int(ROWS[0]), int(COLS[0])), _unobs[0], (5, 0)]
E_ROWS = np.array([e[0] for e in ENTRIES], np.int32)
E_COLS = np.array([e[1] for e in ENTRIES], np.int32)

NW = bmc.priors.NormalWishart(beta0=2.0, nu0=K + 4.0, W0_scale=0.5)
IG = bmc.priors.InverseGamma(6.0, 5.0)
LEARNED = bmc.likelihoods.LearnedNoise(a=6.0, b=5.0)
BIASES = bmc.offsets.Biases(a=6.0, b=5.0)


# --------------------------------------------------------------------------- direct simulation
def _prior_draws(prior, size, rng):
    """``size`` draws of the prior's variables and of M, N (numpy, leading axis ``size``)."""
    if isinstance(prior, bmc.priors.NormalWishart):
        out, F = {}, []
        for side, m in (("M", M1), ("N", M2)):
            Lam = stats.wishart(df=prior.nu0, scale=prior.W0_scale * np.eye(K)).rvs(
                size=size, random_state=rng
            )
            chol = np.linalg.cholesky(np.linalg.inv(Lam))  # covariance Lambda^{-1} = chol chol^T
            mu = np.einsum("nkl,nl->nk", chol, rng.normal(size=(size, K))) / math.sqrt(prior.beta0)
            F.append(
                mu[:, None, :] + np.einsum("nkl,nml->nmk", chol, rng.normal(size=(size, m, K)))
            )
            out[f"mu_{side}"], out[f"Lambda_{side}"] = mu, Lam
        return out, F[0], F[1]
    gamma = prior.b / rng.gamma(prior.a, size=(size, K))  # the inverse-gamma prior
    sd = np.sqrt(gamma)[:, None, :]
    return (
        {"gamma": gamma},
        rng.normal(size=(size, M1, K)) * sd,
        rng.normal(size=(size, M2, K)) * sd,
    )


def bias_draws(biases, size, rng):
    """``size`` prior draws of the bias variances (size, 2) and the biases (size, M1),
    (size, M2); ones and zeros without biases."""
    if biases is None:
        return np.ones((size, 2)), np.zeros((size, M1)), np.zeros((size, M2))
    var = biases.b / rng.gamma(biases.a, size=(size, 2))
    b = rng.normal(size=(size, M1)) * np.sqrt(var[:, :1])
    c = rng.normal(size=(size, M2)) * np.sqrt(var[:, 1:])
    return var, b, c


def joint_draws(prior, likelihood, biases, size, rng):
    """``size`` exact draws of the joint (a dict of arrays with a leading axis ``size``)."""
    prior_state, M, N = _prior_draws(prior, size, rng)
    if likelihood is not None:
        tau = rng.gamma(likelihood.a, 1.0 / likelihood.b, size=size)
    else:
        tau = np.full(size, TAU_FIXED)
    var, b, c = bias_draws(biases, size, rng)
    theta = np.sum(M[:, ROWS] * N[:, COLS], axis=-1) + b[:, ROWS] + c[:, COLS]
    Y = theta + rng.normal(size=theta.shape) / np.sqrt(tau)[:, None]
    return dict(prior_state=prior_state, M=M, N=N, tau=tau, b=b, c=c, var=var, Y=Y)


def functions_of(prior_state, M, N, tau, b, c, var, Y, xp=np):
    """Test functions of one joint draw (the same code for numpy and jax arrays)."""
    f = []
    for name, x in sorted(prior_state.items()):
        if name.startswith("Lambda"):
            f += [x[0, 0], x[1, 1], x[0, 1], xp.log(x[0, 0] * x[1, 1] - x[0, 1] ** 2)]
        elif name.startswith("mu"):
            f += [x[0], x[1], x[0] ** 2]
        else:
            f += [xp.log(x[0]) + xp.log(x[1]), x[0] + x[1]]
    theta_e = xp.sum(M[E_ROWS] * N[E_COLS], axis=-1) + b[E_ROWS] + c[E_COLS]
    theta = xp.sum(M[ROWS] * N[COLS], axis=-1) + b[ROWS] + c[COLS]
    f += list(theta_e) + list(theta_e**2)
    f += [xp.sum(M**2), xp.sum(N**2), xp.sum(Y**2), xp.sum((Y - theta) ** 2), xp.sum(Y * theta)]
    f += [
        tau,
        xp.log(tau),
        b[0],
        b[0] ** 2,
        c[0] ** 2,
        xp.sum(b**2),
        xp.log(var[0]),
        xp.log(var[1]),
    ]
    return jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in f])


def marginal_conditional(prior, likelihood, biases, size, seed):
    draws = joint_draws(prior, likelihood, biases, size, np.random.default_rng(seed))
    return np.asarray(
        jax.vmap(lambda d: functions_of(**d, xp=jnp))(jax.tree.map(jnp.asarray, draws))
    )


# --------------------------------------------------------------------------- Gibbs chains
def _chains(problem, row_order, col_order, keys, state, Y, *, prior, num_steps):
    rows, cols = jnp.asarray(ROWS), jnp.asarray(COLS)

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        prob = dataclasses.replace(
            with_ratings(problem, Y, row_order, col_order), sum_sq=jnp.sum(Y**2)
        )
        state = gibbs.sweep(state, prob, prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        ps = jax.tree.map(lambda x: x[0], state.prior_state)
        f = functions_of(ps, M, N, state.tau[0], b, c, state.bias_var[0], Y, xp=jnp)
        theta = jnp.sum(M[rows] * N[cols], axis=-1) + b[rows] + c[cols]
        Y = theta + jax.random.normal(k_y, theta.shape, theta.dtype) / jnp.sqrt(state.tau[0])
        return (state, Y, key), f

    return run_chains(one_step, (state, Y, keys), num_steps)


def successive_conditional(
    prior, likelihood, biases, *, sampler=None, options=None, num_chains, num_steps, seed
):
    """``sampler = (prior, likelihood, biases)`` given to the sweep (wrong variants for the
    power checks), ``options`` its ``SweepOptions`` (default: the plain sweep); the data
    are always refreshed from the model."""
    s_prior, s_lik, s_bias = sampler or (prior, likelihood, biases)
    template = bmc.RatingData(ROWS, COLS, np.zeros(N_OBS), (M1, M2))
    extra = {} if options is None else {"options": options}
    problem = gibbs.build_problem(
        template, TAU_FIXED, dtype=jnp.float64, likelihood=s_lik, biases=s_bias, **extra
    )
    d = joint_draws(prior, likelihood, biases, num_chains, np.random.default_rng(seed + 1))

    def start(
        key, prior_state, M, N, tau, b, c, var
    ):  # one chain's state (C = 1) at an exact joint draw
        st = gibbs.init(
            key[None],
            problem,
            s_prior,
            K,
            prior_state=jax.tree.map(lambda x: x[None], prior_state),
            M=M[None],
            N=N[None],
        )
        return st._replace(tau=tau[None], row_bias=b[None], col_bias=c[None], bias_var=var[None])

    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(
        keys0,
        *(
            jax.tree.map(jnp.asarray, d[k])
            for k in ("prior_state", "M", "N", "tau", "b", "c", "var")
        ),
    )
    Y = jnp.asarray(d["Y"])
    keys = jax.random.split(jax.random.key(seed), num_chains)
    out = _chains(
        problem,
        jnp.asarray(template.row_view.order),
        jnp.asarray(template.col_view.order),
        keys,
        state,
        Y,
        prior=s_prior,
        num_steps=num_steps,
    )
    return np.asarray(out)


def geweke_z(
    prior,
    likelihood,
    biases,
    *,
    sampler=None,
    options=None,
    num_chains=100,
    num_steps=200,
    num_marginal=40_000,
    seed=0,
):
    succ = successive_conditional(
        prior,
        likelihood,
        biases,
        sampler=sampler,
        options=options,
        num_chains=num_chains,
        num_steps=num_steps,
        seed=seed,
    )
    marg = marginal_conditional(prior, likelihood, biases, num_marginal, seed + 2)
    return z_scores(succ, marg)


# --------------------------------------------------------------------------- deliberately wrong blocks
@dataclasses.dataclass(frozen=True)
class NWWithoutMeanCorrection:
    """The Normal-Wishart block with ``W*^{-1} = W0^{-1} + sum_i x_i x_i^T`` (the scatter
    about zero instead of about the posterior mean)."""

    base: bmc.priors.NormalWishart

    def gibbs_state(self, *a):
        return self.base.gibbs_state(*a)

    def row_priors(self, state):
        return self.base.row_priors(state)

    def factor_stats(self, F):
        return self.base.factor_stats(F)

    def gibbs_update(self, key, stats_M, stats_N, m1, m2):
        out = {}
        for side, (s1, s2), m, k in zip(
            ("M", "N"), (stats_M, stats_N), (m1, m2), jax.random.split(key)
        ):
            beta = self.base.beta0 + m
            Winv = jnp.eye(K, dtype=s2.dtype) / self.base.W0_scale + s2
            out[f"mu_{side}"], out[f"Lambda_{side}"] = wishart_draw(
                k, Winv, self.base.nu0 + m, beta, s1 / beta
            )
        return out


@dataclasses.dataclass(frozen=True)
class TauShapeN:
    """A learned-noise block with shape ``a + n`` instead of ``a + n/2``."""

    base: bmc.likelihoods.LearnedNoise

    def __getattr__(self, name):
        # Everything but the planted block is the base's (values check, flags, ...).
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def sample_tau(self, key, sse, n):
        return self.base.sample_tau(key, sse, 2 * n)


@dataclasses.dataclass(frozen=True)
class BiasVarShapeM:
    """A bias-variance block with shape ``a + m`` instead of ``a + m/2``."""

    base: bmc.offsets.Biases

    def __getattr__(self, name):
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def sample_variance(self, key, sumsq, m):
        return self.base.sample_variance(key, sumsq, 2 * m)


# --------------------------------------------------------------------------- tests
COMBINATIONS = {
    "normal-wishart": (NW, None, None),
    "learned-noise": (IG, LEARNED, None),
    "biases": (IG, None, BIASES),
    "all-three": (NW, LEARNED, BIASES),
}


# the three blocks together in the default suite; each alone (more power per block) is slow
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=() if n == "all-three" else pytest.mark.slow) for n in COMBINATIONS],
)
def test_geweke_new_blocks(name):
    z, z_crit = geweke_z(*COMBINATIONS[name])
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


def test_geweke_with_the_jax_gamma_sampler():
    """The three blocks with every gamma variate (the Wishart draws, ``tau``, the bias
    variances) from ``jax.random.gamma`` (``gamma_sampler="jax"``; the other tests run
    the default, ``"one-hash"``)."""
    from bmczoo.inference.settings import SweepOptions

    z, z_crit = geweke_z(NW, LEARNED, BIASES, options=SweepOptions(gamma_sampler="jax"))
    assert np.max(np.abs(z)) < z_crit, f"max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}"


@pytest.mark.parametrize(
    "wrong",
    [
        "nw-mean-correction",
        pytest.param("tau-shape", marks=pytest.mark.slow),
        pytest.param("bias-variance-shape", marks=pytest.mark.slow),
    ],
)
def test_geweke_detects_wrong_blocks(wrong):
    sampler = {
        "nw-mean-correction": (NWWithoutMeanCorrection(NW), LEARNED, BIASES),
        "tau-shape": (NW, TauShapeN(LEARNED), BIASES),
        "bias-variance-shape": (NW, LEARNED, BiasVarShapeM(BIASES)),
    }[wrong]
    z, z_crit = geweke_z(NW, LEARNED, BIASES, sampler=sampler)
    assert np.max(np.abs(z)) > 2 * z_crit, (
        f"{wrong} not detected: max |z| = {np.max(np.abs(z)):.2f}"
    )
