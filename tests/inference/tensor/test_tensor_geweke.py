"""Geweke (2004) joint-distribution tests of the tensor (CP) Gibbs sweep at D = 3, and the
float64 check of a mode's conditional against the dense regression.

A 4 x 3 x 3 array with 14 observed entries (index 3 of mode 0 has none), K = 2: the
marginal-conditional draws come from the model written with numpy (``gamma`` from the
prior with ``d = m_1 + m_2 + m_3``, ``U_d[:, h] ~ N(0, gamma_h)``, biases, ``tau``, ``Y``),
the successive-conditional chains alternate one sweep
(:func:`bmczoo.inference.tensor.sweep`) with a fresh ``Y``; the harness and its
standard errors are ``tests/inference/_geweke.py``'s.  Power checks: a sweep told twice
the noise precision, and an inverse-gamma conditional with ``2 d`` for ``d``, are caught
(``max |z| > 2 z_crit``).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _rng
from bmczoo.inference import tensor as T

from .._geweke import run_chains, z_scores

pytestmark = pytest.mark.usefixtures("x64")

SHAPE, K, TAU = (4, 3, 3), 2, 1.0
D_TOTAL = sum(SHAPE)


def _pattern():
    rng = np.random.default_rng(7)
    flat = np.sort(rng.choice(3 * 3 * 3, 14, replace=False))
    return np.stack(np.unravel_index(flat, (3, 3, 3)), axis=1).astype(np.int32)


IDX = _pattern()
N_OBS = IDX.shape[0]
_seen = {tuple(r) for r in IDX.tolist()}
_unseen = next(
    (i, j, k) for i in range(3) for j in range(3) for k in range(3) if (i, j, k) not in _seen
)
ENTRIES = np.array([IDX[0], IDX[-1], _unseen, (3, 0, 0)], np.int32)

PRIORS = {
    "fixed": bmc.priors.Fixed(1.0),
    # a = 10: theta^2 grows as gamma^3 with three modes, so its variance needs E[gamma^6]
    "inverse-gamma": bmc.priors.InverseGamma(10.0, 9.0),
    "gamma": bmc.priors.Gamma(beta=math.sqrt(D_TOTAL + 1.0)),
    "discrete": bmc.priors.Discrete(C=2.0, p=0.4, eps=0.3),
}
LEARNED = bmc.likelihoods.LearnedNoise(a=6.0, b=5.0)
BIASES = bmc.offsets.Biases(a=6.0, b=5.0)


@dataclasses.dataclass(frozen=True)
class _DoubledD(bmc.priors.InverseGamma):
    """A planted error: the inverse-gamma conditional with ``2 d`` for ``d``."""

    def sample_conditional(self, key, S, d):
        return super().sample_conditional(key, S, 2 * d)


def _prior_gamma(prior, size, rng):
    shape = (size, K)
    if isinstance(prior, bmc.priors.Fixed):
        return np.full(shape, prior.gamma)
    if isinstance(prior, bmc.priors.InverseGamma):
        return prior.b / rng.gamma(prior.a, 1.0, shape)
    if isinstance(prior, bmc.priors.Gamma):
        return rng.gamma(0.5 * (D_TOTAL + 1), 1.0 / (0.5 * prior.beta**2), shape)
    return np.where(rng.random(shape) < prior.p, prior.C, prior.eps)


def _theta(U, bias, idx, xp=np):
    t = U[0][..., idx[:, 0], :] * U[1][..., idx[:, 1], :] * U[2][..., idx[:, 2], :]
    t = xp.sum(t, axis=-1)
    for d, b in enumerate(bias):
        t = t + b[..., idx[:, d]]
    return t


def _functions(prior, learned, biases, gamma, U, bias, bvar, tau, Y, xp=np):
    """Test functions; ``gamma`` is the prior's variables: the column scales, or with
    Normal-Wishart rows each mode's ``(mu, Lambda)``."""
    out = []
    if isinstance(prior, bmc.priors.NormalWishart):
        for mu, Lam in gamma:
            out += [mu[..., 0], mu[..., 1] ** 2, xp.linalg.slogdet(Lam)[1], Lam[..., 0, 1]]
    elif not isinstance(prior, bmc.priors.Fixed):
        gs = xp.sort(gamma, axis=-1)
        out += [gs[..., 0], gs[..., -1]]
        if not isinstance(prior, bmc.priors.Discrete):
            out += [xp.sum(xp.log(gamma), -1), xp.sum(gamma**2, -1)]
    th = _theta(U, bias, ENTRIES, xp)
    for e in range(ENTRIES.shape[0]):
        out += [th[..., e], th[..., e] ** 2]
    t_obs = _theta(U, bias, IDX, xp)
    out += [
        sum(xp.sum(F**2, axis=(-2, -1)) for F in U),
        xp.sum(Y**2, -1),
        xp.sum((Y - t_obs) ** 2, -1),
        xp.sum(Y * t_obs, -1),
    ]
    if learned:
        out += [tau, xp.log(tau)]
    if biases:
        out += [bias[0][..., 0], bias[2][..., 1], xp.log(bvar[..., 0]), xp.log(bvar[..., 2])]
    return xp.stack(out, axis=-1)


def _nw_rows(prior, size, rng):
    """Each mode's ``(mu, Lambda)`` from NW(0, beta0, W0_scale I, nu0 = K) and its rows."""
    from scipy import stats

    rows, U = [], []
    for m in SHAPE:
        Lam = stats.wishart(df=K, scale=prior.W0_scale * np.eye(K)).rvs(size, random_state=rng)
        cov = np.linalg.inv(Lam)
        L = np.linalg.cholesky(cov)
        mu = np.einsum("skl,sl->sk", L, rng.standard_normal((size, K))) / np.sqrt(prior.beta0)
        F = mu[:, None, :] + np.einsum("skl,sml->smk", L, rng.standard_normal((size, m, K)))
        rows.append((mu, Lam))
        U.append(F)
    return tuple(rows), tuple(U)


def _joint(prior, learned, biases, size, seed):
    rng = np.random.default_rng(seed)
    if isinstance(prior, bmc.priors.NormalWishart):
        gamma, U = _nw_rows(prior, size, rng)
    else:
        gamma = _prior_gamma(prior, size, rng)
        U = tuple(rng.standard_normal((size, m, K)) * np.sqrt(gamma)[:, None, :] for m in SHAPE)
    bvar = BIASES.b / rng.gamma(BIASES.a, 1.0, (size, 3)) if biases else np.ones((size, 3))
    bias = (
        tuple(
            rng.standard_normal((size, m)) * np.sqrt(bvar[:, d : d + 1])
            for d, m in enumerate(SHAPE)
        )
        if biases
        else ()
    )
    tau = rng.gamma(LEARNED.a, 1.0 / LEARNED.b, size) if learned else np.full(size, TAU)
    Y = _theta(U, bias, IDX) + rng.standard_normal((size, N_OBS)) / np.sqrt(tau)[:, None]
    return gamma, U, bias, bvar, tau, Y


def _chains(prior, sampler_prior, learned, biases, sampler_tau, num_chains, num_steps, seed, moves):
    lik = LEARNED if learned else bmc.likelihoods.Tempered(noise_sd=1.0 / math.sqrt(sampler_tau))
    data = bmc.TensorData(IDX, np.zeros(N_OBS), SHAPE)
    problem = T.build_problem(data, sampler_tau, jnp.float64)
    gamma, U, bias, bvar, tau, Y = (
        jax.tree.map(jnp.asarray, x) for x in _joint(prior, learned, biases, num_chains, seed + 1)
    )
    keys = jax.random.split(jax.random.key(seed), num_chains)
    idx = jnp.asarray(IDX)
    bz = BIASES if biases else None

    def step(carry, _):
        key, gamma, U, bias, bvar, tau, Y = carry
        key, k_sweep, k_y = jax.random.split(key, 3)
        prob = problem._replace(
            values=Y, modes=tuple(c._replace(values=Y[c.index]) for c in problem.modes)
        )
        one = lambda x: x[None]  # noqa: E731
        # a fixed noise precision is the sweep's (sampler_tau), a learned one the chain's
        t = tau if learned else jnp.full_like(tau, sampler_tau)
        nw = isinstance(gamma, tuple)
        st = T.TensorState(
            tuple(map(one, U)),
            jnp.ones((1, K)) if nw else one(gamma),
            one(t),
            tuple(map(one, bias)),
            one(bvar),
            k_sweep[None],
            jax.tree.map(one, gamma) if nw else (),
        )
        st = T.sweep(st, prob, sampler_prior, lik, bz, moves)
        first = lambda x: x[0]  # noqa: E731
        U, bias = tuple(map(first, st.U)), tuple(map(first, st.bias))
        gamma = jax.tree.map(first, st.rows) if nw else st.gamma[0]
        bvar = st.bias_var[0]
        tau = st.tau[0] if learned else tau
        f = _functions(prior, learned, biases, gamma, U, bias, bvar, tau, Y, jnp)
        th = _theta(U, bias, idx, jnp)
        Y = th + _rng.normal(k_y, th.shape, th.dtype) / jnp.sqrt(tau if learned else TAU)
        return (key, gamma, U, bias, bvar, tau, Y), f

    return run_chains(step, (keys, gamma, U, bias, bvar, tau, Y), num_steps)


def _z(
    prior,
    sampler_prior=None,
    *,
    learned=False,
    biases=False,
    sampler_tau=TAU,
    seed=0,
    moves=False,
    chains=(400, 400),
):
    """The z-scores of ``chains = (number, steps)`` successive-conditional chains against
    the marginal-conditional draws.  With three modes the test functions are heavy
    tailed (theta^2 grows as gamma^3): the chain means' normal approximation needs
    hundreds of chains, more where the moves make the chains' draws far apart."""
    sampler_prior = prior if sampler_prior is None else sampler_prior
    succ = _chains(prior, sampler_prior, learned, biases, sampler_tau, *chains, seed, moves)
    marg = _functions(prior, learned, biases, *_joint(prior, learned, biases, 100_000, seed + 2))
    return z_scores(succ, marg)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("fixed", marks=pytest.mark.slow),
        "inverse-gamma",
        pytest.param("gamma", marks=pytest.mark.slow),
        "discrete",
    ],
)
def test_geweke_every_prior(name):
    z, z_crit = _z(PRIORS[name])
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


@pytest.mark.parametrize(
    "name, learned, biases",
    [
        pytest.param("discrete", True, True, marks=pytest.mark.slow),
        ("discrete", False, False),
        pytest.param("inverse-gamma", False, False, marks=pytest.mark.slow),
    ],
    ids=["discrete+learned+biases", "discrete", "inverse-gamma"],
)
def test_geweke_column_moves(name, learned, biases):
    """The sweep with the column moves (each mode's column integrated out in turn; the
    discrete prior's spike/slab swaps too)."""
    z, z_crit = _z(
        PRIORS[name], learned=learned, biases=biases, seed=3, moves=True, chains=(1200, 150)
    )
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


@pytest.mark.slow
def test_geweke_swaps_have_power(monkeypatch):
    """Swaps without their proposal densities (a birth accepted on the marginal alone)
    are caught."""
    monkeypatch.setattr(T.core, "_log_normal", lambda x, mean, var: jnp.zeros(x.shape[0]))
    z, z_crit = _z(PRIORS["discrete"], seed=3, moves=True, chains=(1200, 150))
    assert np.max(np.abs(z)) > 2 * z_crit, np.round(z, 2)


@pytest.mark.slow
def test_geweke_column_moves_have_power(monkeypatch):
    """Moves whose rescaled design forgets one of the other modes (``s^(D-2)`` for
    ``s^(D-1)``) are caught."""
    monkeypatch.setattr(T.core, "_design_scale", lambda log_s, D: jnp.exp((D - 2) * log_s))
    z, z_crit = _z(PRIORS["discrete"], seed=3, moves=True)
    assert np.max(np.abs(z)) > 2 * z_crit, np.round(z, 2)


def test_geweke_normal_wishart_rows():
    """Normal-Wishart rows per mode (each mode's mean and precision) with learned noise."""
    z, z_crit = _z(bmc.priors.NormalWishart(), learned=True, seed=4)
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


@pytest.mark.slow
def test_geweke_normal_wishart_rows_have_power():
    """A sampler told another Wishart scale is caught."""
    wrong = bmc.priors.NormalWishart(W0_scale=4.0)
    z, z_crit = _z(bmc.priors.NormalWishart(), wrong, learned=True, seed=4)
    assert np.max(np.abs(z)) > 2 * z_crit, np.round(z, 2)


@pytest.mark.parametrize(
    "biases", [pytest.param(True, marks=pytest.mark.slow), False], ids=["biases", "no-biases"]
)
def test_geweke_learned_noise(biases):
    """Learned noise: without biases ``tau``'s block reads the last mode's sums."""
    z, z_crit = _z(PRIORS["inverse-gamma"], learned=True, biases=biases, seed=1)
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param(dict(sampler_tau=2.0 * TAU), marks=pytest.mark.slow),
        dict(sampler_prior=_DoubledD(10.0, 9.0)),
    ],
    ids=["doubled-tau", "doubled-d"],
)
def test_geweke_has_power(kw):
    z, z_crit = _z(PRIORS["inverse-gamma"], **kw)
    assert np.max(np.abs(z)) > 2 * z_crit, np.round(z, 2)


@pytest.mark.parametrize("path", ["segment", "bcsr", "gram"])
def test_mode_conditional_is_the_dense_regression(path):
    """``P_i = diag(1/gamma) + t sum_k w_k w_k^T`` and ``rhs_i = t sum_k y_k w_k`` over the
    entries of row ``i`` of mode ``d`` (float64, every hot path; with biases the target)."""
    from bmczoo.linalg import use_hot_path

    rng = np.random.default_rng(0)
    shape, n, K8 = (7, 6, 5), 80, 8  # K = 8 reaches the compiled Gram kernel
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), 1)
    y = rng.normal(size=n)
    with use_hot_path(path):
        p = T.build_problem(bmc.TensorData(idx, y, shape), 1.0, jnp.float64)
    U = tuple(jnp.asarray(rng.normal(size=(2, m, K8))) for m in shape)
    gamma = rng.uniform(0.5, 2.0, (2, K8))
    t = np.array([2.0, 3.0])
    target = rng.normal(size=(2, n))
    for d in range(3):
        for tg in (0.0, jnp.asarray(target)):
            P, rhs = T.mode_conditional(p, U, d, tg, jnp.asarray(t), jnp.asarray(1.0 / gamma))
            yy = np.broadcast_to(y, (2, n)) if np.ndim(tg) == 0 else target
            for c in range(2):
                for i in range(shape[d]):
                    ks = np.flatnonzero(idx[:, d] == i)
                    W = np.ones((ks.size, K8))
                    for e in range(3):
                        if e != d:
                            W = W * np.asarray(U[e][c])[idx[ks, e]]
                    np.testing.assert_allclose(
                        P[c, i], np.diag(1.0 / gamma[c]) + t[c] * W.T @ W, rtol=1e-12, atol=1e-12
                    )
                    np.testing.assert_allclose(
                        rhs[c, i], t[c] * W.T @ yy[c, ks], rtol=1e-12, atol=1e-12
                    )
