"""``bmc.fit(TensorData, method="vb")``: the CAVI of the CP model
(:mod:`bmczoo.inference.tensor.vb`), in float64 on a tiny 5 x 4 x 3 array with K = 2:

* each mode's update is the exact optimum: its expected design moments against a
  brute-force sum over the entries, its result against the dense solve, and the ELBO's
  gradient in the updated means and covariances is zero;
* the expected log-likelihood against a Monte Carlo estimate from draws of q (within
  ``z_crit`` standard errors);
* the ELBO never decreases, for every column-scale prior, fixed and learned noise;

and on a planted rank-2 20 x 20 x 20 array the fit's test RMSE is the noise's (a bound
derived from the noise sd), its rank posterior is the planted rank, save / load keeps
every output; bad options raise clear errors.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import TensorData
from bmczoo.inference.tensor import core, vb

pytestmark = pytest.mark.usefixtures("x64")

Z_CRIT = NormalDist().inv_cdf(1 - 0.01 / 2)
SHAPE, K, TAU = (5, 4, 3), 2, 2.0
PRIORS = {
    "fixed": bmc.priors.Fixed,
    "inverse-gamma": bmc.priors.InverseGamma,
    "gamma": bmc.priors.Gamma,
    "discrete": bmc.priors.Discrete,
}


def _tiny(seed=0, n=30):
    rng = np.random.default_rng(seed)
    flat = rng.choice(int(np.prod(SHAPE)), n, replace=False)
    idx = np.stack(np.unravel_index(flat, SHAPE), 1)
    return TensorData(idx, rng.normal(size=n), SHAPE)


def _state(seed=1, learned=False):
    """A random q-state: means, SPD covariances, E[1/gamma] and (learned) q(tau)."""
    rng = np.random.default_rng(seed)
    mean = tuple(jnp.asarray(rng.normal(size=(1, m, K))) for m in SHAPE)
    A = [rng.normal(size=(1, m, K, K)) * 0.3 for m in SHAPE]
    cov = tuple(jnp.asarray(a @ np.swapaxes(a, -1, -2) + 0.1 * np.eye(K)) for a in A)
    noise = {"shape": jnp.asarray([7.0]), "rate": jnp.asarray([3.0])} if learned else {}
    return vb.TensorVBState(mean, cov, jnp.asarray(rng.uniform(0.5, 2.0, (1, K))), noise)


def _second(state, d, i):
    m, S = np.asarray(state.mean[d][0, i]), np.asarray(state.cov[d][0, i])
    return S + np.outer(m, m)


def test_mode_moments_match_brute_force():
    data = _tiny()
    problem = core.build_problem(data, TAU, jnp.float64)
    state = _state()
    for d in range(len(SHAPE)):
        G, r = (np.asarray(x[0]) for x in vb.mode_moments(state, problem, d))
        Gb, rb = np.zeros((SHAPE[d], K, K)), np.zeros((SHAPE[d], K))
        for e, idx in enumerate(data.indices):
            Ew, Eww = np.ones(K), np.ones((K, K))
            for o in range(len(SHAPE)):
                if o != d:
                    Ew = Ew * np.asarray(state.mean[o][0, idx[o]])
                    Eww = Eww * _second(state, o, idx[o])
            Gb[idx[d]] += Eww
            rb[idx[d]] += data.values[e] * Ew
        np.testing.assert_allclose(G, Gb, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(r, rb, rtol=1e-12, atol=1e-12)
        # the update is the dense Gaussian solve with the prior's diagonal precision
        m, S = vb.update_mode(state, problem, d, state.inv_gamma, TAU)
        P = TAU * Gb + np.diag(np.asarray(state.inv_gamma[0]))
        np.testing.assert_allclose(np.asarray(S[0]), np.linalg.inv(P), rtol=1e-10)
        mb = np.linalg.solve(P, TAU * rb[..., None])[..., 0]
        np.testing.assert_allclose(np.asarray(m[0]), mb, rtol=1e-10, atol=1e-12)


def test_chunks_change_nothing():
    """The moments over chunks of 7 entries (the last one padded) equal those in one chunk."""
    problem = core.build_problem(_tiny(), TAU, jnp.float64)
    state = _state()
    for d in range(len(SHAPE)):
        for a, b in zip(
            vb.mode_moments(state, problem, d), vb.mode_moments(state, problem, d, chunk=7)
        ):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(vb.expected_sq_error(state, problem)),
        np.asarray(vb.expected_sq_error(state, problem, chunk=7)),
        rtol=1e-12,
    )


@pytest.mark.parametrize("learned", [False, True], ids=["tempered", "learned"])
def test_update_zeroes_the_elbo_gradient(learned):
    """With the fixed prior (no q(gamma)) the ELBO is a function of the factors' q (and
    q(tau)); right after mode d's update its gradient in mode d's means and covariances
    is zero."""
    problem = core.build_problem(_tiny(), TAU, jnp.float64)
    prior = bmc.priors.Fixed(gamma=0.7)
    lik = bmc.likelihoods.LearnedNoise() if learned else bmc.likelihoods.Tempered(noise_sd=0.5)
    tau = 4.0
    state = _state(learned=learned)._replace(inv_gamma=jnp.full((1, K), 1.0 / 0.7))
    t = lik.vb_block_precision(state.noise, tau)
    for d in range(len(SHAPE)):
        m, S = vb.update_mode(state, problem, d, state.inv_gamma, t)
        state = state._replace(
            mean=state.mean[:d] + (m,) + state.mean[d + 1 :],
            cov=state.cov[:d] + (S,) + state.cov[d + 1 :],
        )

        def f(m, S, state=state, d=d):
            s = state._replace(
                mean=state.mean[:d] + (m,) + state.mean[d + 1 :],
                cov=state.cov[:d] + (S,) + state.cov[d + 1 :],
            )
            return vb.elbo(s, problem, prior, tau, likelihood=lik)[0]

        gm, gS = jax.grad(f, argnums=(0, 1))(m, S)
        np.testing.assert_allclose(np.asarray(gm), 0.0, atol=1e-9)
        np.testing.assert_allclose(np.asarray(gS), 0.0, atol=1e-9)


@pytest.mark.parametrize("learned", [False, True], ids=["tempered", "learned"])
def test_expected_loglik_matches_monte_carlo(learned):
    """The ELBO's likelihood term at a fixed tau (``E_q[log N(y | theta, 1/tau)]``) and the
    expected squared error against draws of the factors from q."""
    data = _tiny()
    problem = core.build_problem(data, TAU, jnp.float64)
    state = _state(learned=False)
    lik = bmc.likelihoods.Tempered(noise_sd=TAU**-0.5)
    sq = vb.expected_sq_error(state, problem)
    exact = float(lik.vb_elbo_term({}, data.n, sq, TAU)[0])
    rng = np.random.default_rng(2)
    S = 4000
    theta = np.ones((S, data.n, K))
    for d in range(len(SHAPE)):
        L = np.linalg.cholesky(np.asarray(state.cov[d][0]))
        U = np.asarray(state.mean[d][0]) + np.einsum(
            "ikl,sil->sik", L, rng.normal(size=(S, SHAPE[d], K))
        )
        theta = theta * U[:, data.indices[:, d]]
    err = (data.values - theta.sum(-1)) ** 2
    val = np.sum(0.5 * np.log(TAU / (2 * np.pi)) - 0.5 * TAU * err, axis=1)
    se = val.std(ddof=1) / np.sqrt(S)
    assert abs(val.mean() - exact) < Z_CRIT * se, (val.mean(), exact, se)
    sse = err.sum(1)
    assert abs(sse.mean() - float(sq[0])) < Z_CRIT * sse.std(ddof=1) / np.sqrt(S)
    if learned:  # q(tau)'s term: E[log tau] and E[tau] of the gamma q
        q = {"shape": jnp.asarray([7.0]), "rate": jnp.asarray([3.0])}
        learned_lik = bmc.likelihoods.LearnedNoise()
        taus = rng.gamma(7.0, 1.0 / 3.0, size=S)
        val = (
            0.5 * data.n * (np.log(taus) - np.log(2 * np.pi))
            - 0.5 * taus * float(sq[0])
            + (learned_lik.a - 1) * np.log(taus)
            - learned_lik.b * taus
            - ((7.0 - 1) * np.log(taus) - 3.0 * taus)
        )
        from scipy.special import gammaln

        const = (
            learned_lik.a * np.log(learned_lik.b)
            - gammaln(learned_lik.a)
            - (7.0 * np.log(3.0) - gammaln(7.0))
        )
        got = float(learned_lik.vb_elbo_term(q, data.n, sq, None)[0])
        se = val.std(ddof=1) / np.sqrt(S)
        assert abs(val.mean() + const - got) < Z_CRIT * se, (val.mean() + const, got, se)


@pytest.mark.parametrize("learned", [False, True], ids=["tempered", "learned"])
@pytest.mark.parametrize("name", list(PRIORS))
def test_elbo_never_decreases(name, learned):
    problem = core.build_problem(_tiny(seed=3), TAU, jnp.float64)
    prior = PRIORS[name]()
    lik = bmc.likelihoods.LearnedNoise() if learned else None
    keys = jax.random.split(jax.random.key(0), 2)
    state = vb.init(keys, problem, prior, K, likelihood=lik)
    step = jax.jit(
        lambda s: (lambda new: (new, vb.elbo(new, problem, prior, TAU, likelihood=lik)))(
            vb.update(s, problem, prior, TAU, likelihood=lik)
        )
    )
    trace = []
    for _ in range(40):
        state, e = step(state)
        trace.append(np.asarray(e))
    trace = np.stack(trace)
    assert np.all(np.isfinite(trace))
    drop = np.diff(trace, axis=0)
    assert np.all(drop >= -1e-10 * np.abs(trace[1:])), drop.min()


NOISE = 0.3


def _planted(shape=(20, 20, 20), R=2, frac=0.25, seed=0):
    """A planted CP-rank-``R`` array with noise sd :data:`NOISE`: (train, test)."""
    rng = np.random.default_rng(seed)
    U = [rng.normal(size=(m, R)) for m in shape]
    n = int(frac * np.prod(shape))
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), 1)
    truth = np.einsum("nr,nr,nr->n", *(u[idx[:, d]] for d, u in enumerate(U)))
    return TensorData(idx, 3.0 + truth + NOISE * rng.normal(size=n), shape).split(0.2, seed=0)


def test_recovers_a_planted_array(tmp_path):
    train, test = _planted()
    fit = bmc.fit(
        train,
        K=4,
        method="vb",
        test=test,
        likelihood=bmc.likelihoods.LearnedNoise(),
        num_chains=2,
        progress_bar=False,
    )
    assert type(fit).__name__ == "TensorFit" and fit.info.method == "vb"
    S = 200
    assert fit.factors["U2"].shape == (1, S, 20, 4) and fit.samples["gamma"].shape == (1, S, 4)
    assert fit.samples["tau"].shape == (1, S) and fit.rmse_draw.shape == (1, S)
    assert np.all(np.diff(-fit.losses) >= -1e-9 * np.abs(fit.losses[1:]))
    # the test MSE is the noise's plus the estimation error of p = R sum_d m_d parameters
    # from n_train entries (about NOISE^2 p / n_train), and the test average of the squared
    # noise exceeds NOISE^2 by at most Z_CRIT sqrt(2 / n_test) relative
    p, n_train = 2 * 60, train.n
    bound = NOISE * np.sqrt(1.0 + Z_CRIT * np.sqrt(2.0 / test.n) + 2.0 * p / n_train)
    rmse = fit.rmse(test)
    assert rmse < bound, (rmse, bound)
    # the noise sd from q(tau): relative error about 1 / sqrt(2 n) plus the fit's p / (2 n)
    sd = np.sqrt(fit.noise_var())
    assert abs(sd / NOISE - 1.0) < Z_CRIT / np.sqrt(2.0 * n_train) + p / n_train, sd
    # the discrete prior (default): the planted rank, exactly from q(gamma_h = C)
    post = fit.rank_posterior()
    assert max(post, key=post.get) == 2 and abs(sum(post.values()) - 1.0) < 1e-12
    fit.save(tmp_path / "vb.npz")
    back = bmc.load(tmp_path / "vb.npz")
    for a, b in zip(
        fit.predict(test.indices, return_std=True), back.predict(test.indices, return_std=True)
    ):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(fit.predictive_interval(test.indices), back.predictive_interval(test.indices)):
        np.testing.assert_array_equal(a, b)
    assert back.rank_posterior() == post and back.rmse(test) == rmse
    assert back.info.method == "vb" and back.q.keys() == fit.q.keys()


def test_rank_posterior_is_poisson_binomial():
    """The exact rank posterior under q(gamma): independent columns, each active with the
    discrete prior's q(gamma_h = C)."""
    fit = bmc.fit(_tiny(), K=2, method="vb", max_iter=5, progress_bar=False)
    p = np.asarray(fit.q["gamma/slab_prob"])
    want = {0: (1 - p[0]) * (1 - p[1]), 1: p[0] * (1 - p[1]) + p[1] * (1 - p[0]), 2: p[0] * p[1]}
    got = fit.rank_posterior()
    assert got.keys() <= want.keys()
    for r, v in want.items():
        assert abs(got.get(r, 0.0) - v) < 1e-12


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(prior=bmc.priors.NormalWishart()), ValueError, "column-scale prior"),
        (dict(biases=True), ValueError, "biases= is not implemented for method='vb'"),
        (dict(likelihood=bmc.likelihoods.Probit()), ValueError, "probit likelihood"),
        (dict(devices=jax.devices()[:1]), ValueError, "devices= is not implemented"),
        (dict(checkpoint="x.npz"), ValueError, "checkpoint= is not implemented"),
        (dict(num_steps=10), ValueError, "num_steps= applies to method='svi'"),
        (dict(max_iter=0), ValueError, "max_iter must be a positive integer"),
        (dict(tol=-1.0), ValueError, "tol must be finite"),
    ],
    ids=[
        "normal-wishart",
        "biases",
        "probit",
        "devices",
        "checkpoint",
        "svi-option",
        "max-iter",
        "tol",
    ],
)
def test_bad_options(kw, err, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(err, match=match):
        bmc.fit(_tiny(), K=2, method="vb", progress_bar=False, **kw)
