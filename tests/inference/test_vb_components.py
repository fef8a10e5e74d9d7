"""Mean-field VB for the model components of docs/algorithms.md (Normal-Wishart rows,
learned noise, biases) in every combination with the column-scale priors.

What is checked (float64 unless said otherwise):

* **CAVI never decreases the ELBO** for every prior x {Tempered, LearnedNoise} x biases
  on/off, two runs each, on a small random problem; the tolerance is a relative 1e-12 of
  |ELBO| (float64 rounding of sums of ~100 terms of size |ELBO|).
* **Each new update is the exact coordinate optimum**: right after its update, moving the
  parameters of ``q(tau)``, of ``q(b_i)`` / ``q(c_j)``, of ``q(s^2)``, of the rows' ``q``
  with the biases and the Normal-Wishart shift, or of the Normal-Wishart ``q(mu,
  Lambda)`` (``mu*, beta*, nu*, W*``) by a small step in either direction lowers the
  ELBO.  With step ``1e-3`` the loss is of order ``1e-6`` times the curvature, many
  orders above float64 rounding (~1e-13 of |ELBO|); a wrong update (not the optimum)
  gains at first order in one of the two directions.
* **Normal-Wishart ELBO term**: at the optimal ``q`` it equals the log NW evidence of
  Murphy (2007) computed here with ``scipy.special.multigammaln`` and numpy, with
  ``sum x x^T`` replaced by ``sum_i (m_i m_i^T + V_i)``.
* **Expected squared error with biases** equals the per-rating formula written out in
  numpy.
* **Sharded equals serial** (four CPU devices in a child process, as in
  ``test_sharding``).
* ``bmc.fit(..., method="vb")`` end to end: predictions include the biases and agree with
  the RMSE trace, checkpoints resume exactly with the new state, learned noise recovers
  the simulated noise level, ``q_gamma`` of the Normal-Wishart prior says it has none.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import multigammaln

import bmczoo as bmc
from bmczoo.inference import vb
from bmczoo.inference.vb import cavi
from bmczoo.inference.gibbs import build_problem
from bmczoo.likelihoods import LearnedNoise, Tempered
from bmczoo.offsets import Biases

from ._devices import check_equal, run_four_devices

PRIORS = {
    "fixed": bmc.priors.Fixed(1.0),
    "inverse-gamma": bmc.priors.InverseGamma(1.0, 0.1),
    "gamma": bmc.priors.Gamma(beta=3.0),
    "discrete": bmc.priors.Discrete(C=4.0, p=0.3, eps=0.05),
    "normal-wishart": bmc.priors.NormalWishart(),
}
LIKELIHOODS = {
    "tempered": Tempered(noise_sd=0.8),
    "learned": LearnedNoise(a=2.0, b=1.0, temper=0.7),
}
M1, M2, K = 13, 11, 3


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _data(seed=0):
    rng = np.random.default_rng(seed)
    r, c = np.nonzero(rng.random((M1, M2)) < 0.5)
    U, Vt = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    y = np.sum(U[r] * Vt[c], axis=1) + 0.5 * rng.normal(size=r.size) + 0.3 * rng.normal(size=M1)[r]
    return bmc.RatingData(r, c, y, (M1, M2))


def _problem(data):
    return build_problem(data, 1.0, dtype=jnp.float64)


def _runner(prior, lik, biases):
    """Jitted ``(state) -> (state after one CAVI iteration, its ELBO)`` and the ELBO."""
    p = _problem(_data())
    kw = dict(likelihood=lik, biases=biases)
    tau = lik.precision(p.rows.values.shape[0])

    @jax.jit
    def step(state):
        state = vb.update(state, p.rows, p.cols, prior, tau, **kw)
        return state, vb.elbo(state, p.rows, prior, tau, **kw)

    elbo = jax.jit(lambda s: vb.elbo(s, p.rows, prior, tau, **kw))
    return p, tau, step, elbo


def _start(prior, lik, biases, C=2, seed=1):
    return vb.init(
        jax.random.split(jax.random.key(seed), C),
        (M1, M2),
        prior,
        K,
        jnp.float64,
        likelihood=lik,
        biases=biases,
    )


# ----------------------------------------------------------------------------- monotone ELBO
def _combinations():
    """Every prior x likelihood x biases; the default suite runs each prior with both new
    components and the Normal-Wishart prior in every combination (the rest: slow)."""
    for prior in PRIORS:
        for lik in LIKELIHOODS:
            for biases in (False, True):
                default = prior == "normal-wishart" or (lik == "learned" and biases)
                yield pytest.param(
                    prior,
                    lik,
                    biases,
                    id=f"{prior}-{lik}-{'bias' if biases else 'no-bias'}",
                    marks=() if default else pytest.mark.slow,
                )


@pytest.mark.parametrize("prior, lik, biases", list(_combinations()))
def test_elbo_never_decreases(prior, lik, biases):
    prior, lik = PRIORS[prior], LIKELIHOODS[lik]
    b = Biases() if biases else None
    _, _, step, _ = _runner(prior, lik, b)
    state = _start(prior, lik, b)
    trace = []
    for _ in range(25):
        state, e = step(state)
        trace.append(np.asarray(e))
    trace = np.array(trace)
    assert np.all(np.isfinite(trace))
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= 1e-12 * np.abs(trace[1:])), drops.max()


# ----------------------------------------------------------------------------- exact optima
def _perturbed_elbos(elbo, state, field, key, index, step=1e-3, log=False):
    """ELBO of ``state`` with ``state.<field>[key][index]`` moved by +-step (relative for
    positive scale parameters when ``log``)."""
    out = []
    for sgn in (1.0, -1.0):
        d = dict(getattr(state, field))
        x = np.array(d[key])
        x[index] = x[index] * math.exp(sgn * step) if log else x[index] + sgn * step
        d[key] = jnp.asarray(x)
        out.append(float(elbo(state._replace(**{field: d}))[0]))
    return out


def _assert_lower(base, others, scale):
    # a loss (base - other) > 0 of order step^2; rounding is ~1e-13 |ELBO|
    for o in others:
        assert base - o > 1e-11 * scale, (base, others)


def _converged(prior, lik, biases, iters=15):
    p, tau, step, elbo = _runner(prior, lik, biases)
    state = _start(prior, lik, biases, C=1)
    for _ in range(iters):
        state, _ = step(state)
    return p, tau, step, elbo, state


def test_q_tau_is_the_coordinate_optimum():
    """``q(tau)`` is updated last: after ``update`` its shape and rate are optimal."""
    lik = LIKELIHOODS["learned"]
    _, _, step, elbo, state = _converged(PRIORS["inverse-gamma"], lik, Biases())
    base = float(elbo(state)[0])
    for key in ("shape", "rate"):
        _assert_lower(base, _perturbed_elbos(elbo, state, "noise", key, 0, log=True), abs(base))
    # and it is Gamma(a + t n / 2, b + t E[SSE] / 2)
    p = _problem(_data())
    sse = float(vb.expected_sq_error(state, p.rows)[0])
    n = p.rows.values.shape[0]
    np.testing.assert_allclose(
        float(state.noise["shape"][0]), lik.a + 0.5 * lik.temper * n, rtol=1e-14
    )
    np.testing.assert_allclose(
        float(state.noise["rate"][0]), lik.b + 0.5 * lik.temper * sse, rtol=1e-12
    )


@pytest.mark.parametrize("lik", list(LIKELIHOODS))
def test_nw_q_is_the_coordinate_optimum(lik):
    """``q(mu, Lambda)`` of both factors is updated after the factors and biases and does
    not interact with ``q(tau)``: after ``update`` every NW parameter is optimal."""
    prior = PRIORS["normal-wishart"]
    _, _, _, elbo, state = _converged(prior, LIKELIHOODS[lik], Biases())
    base = float(elbo(state)[0])
    for side in ("M", "N"):
        for k in range(K):
            _assert_lower(
                base, _perturbed_elbos(elbo, state, "prior", f"mu_{side}", (0, k)), abs(base)
            )
        for key in ("beta", "nu"):
            _assert_lower(
                base,
                _perturbed_elbos(elbo, state, "prior", f"{key}_{side}", 0, log=True),
                abs(base),
            )
        for idx in ((0, 0, 0), (0, 1, 1), (0, 2, 2)):
            _assert_lower(
                base,
                _perturbed_elbos(elbo, state, "prior", f"Winv_{side}", idx, log=True),
                abs(base),
            )
        # an off-diagonal move (kept symmetric) of W*^{-1}
        for sgn in (1.0, -1.0):
            d = dict(state.prior)
            x = np.array(d[f"Winv_{side}"])
            x[0, 0, 1] += sgn * 1e-3
            x[0, 1, 0] += sgn * 1e-3
            d[f"Winv_{side}"] = jnp.asarray(x)
            assert base - float(elbo(state._replace(prior=d))[0]) > 1e-11 * abs(base)


def test_bias_variances_are_the_coordinate_optimum():
    """``q(s_b^2)``, ``q(s_c^2)`` only interact with ``q(b)``, ``q(c)``, which do not
    change after them in an iteration: after ``update`` they are optimal."""
    _, _, _, elbo, state = _converged(
        PRIORS["normal-wishart"], LIKELIHOODS["learned"], Biases(a=2.0, b=0.5)
    )
    base = float(elbo(state)[0])
    for key in ("sb_shape", "sb_rate", "sc_shape", "sc_rate"):
        _assert_lower(base, _perturbed_elbos(elbo, state, "bias", key, 0, log=True), abs(base))


@pytest.mark.parametrize("prior", ["inverse-gamma", "normal-wishart"])
def test_bias_and_row_updates_are_the_coordinate_optimum(prior):
    """``q(b)``, ``q(c)`` and (Normal-Wishart) the rows of ``q(M)`` (with the biases'
    residuals and the prior shift) are followed by other updates in an iteration, so each is
    applied alone here (the engine's own functions) to a state, then its parameters are
    moved: each move lowers the ELBO."""
    prior = PRIORS[prior]
    lik = LIKELIHOODS["learned"]
    biases = Biases()
    p, tau, _, elbo, state = _converged(prior, lik, biases, iters=4)
    rows, cols = p.rows, p.cols
    t = lik.vb_block_precision(state.noise, tau)
    bias = dict(state.bias)
    dt = jnp.float64

    # q(b) given everything else
    b_mean, b_var = biases.vb_bias_update(
        cavi._bias_resid_sum(rows, state.n, state.m, bias["c_mean"]),
        cavi._counts(rows, dt)[None],
        t,
        bias["sb_shape"],
        bias["sb_rate"],
    )
    s = state._replace(bias={**bias, "b_mean": b_mean, "b_var": b_var})
    base = float(elbo(s)[0])
    for i in (0, 4, M1 - 1):
        _assert_lower(base, _perturbed_elbos(elbo, s, "bias", "b_mean", (0, i)), abs(base))
        _assert_lower(base, _perturbed_elbos(elbo, s, "bias", "b_var", (0, i), log=True), abs(base))

    # q(c) given everything else (the new q(b))
    c_mean, c_var = biases.vb_bias_update(
        cavi._bias_resid_sum(cols, s.m, s.n, b_mean),
        cavi._counts(cols, dt)[None],
        t,
        bias["sc_shape"],
        bias["sc_rate"],
    )
    s = s._replace(bias={**s.bias, "c_mean": c_mean, "c_var": c_var})
    base = float(elbo(s)[0])
    for j in (0, 3, M2 - 1):
        _assert_lower(base, _perturbed_elbos(elbo, s, "bias", "c_mean", (0, j)), abs(base))
        _assert_lower(base, _perturbed_elbos(elbo, s, "bias", "c_var", (0, j), log=True), abs(base))

    if prior.has_column_scales:
        # vb.elbo takes q(gamma) at its optimum for the current E[S]: moving q(M) moves
        # q(gamma) too, so q(M) is not a coordinate optimum of that function (the row
        # update with the column scales is checked in test_vb.py)
        return
    # q(M) given everything else: means and covariances of a few rows
    (PM, sM), _ = prior.vb_row_priors(vb.prior_q(s))
    m, V = cavi._update_factor(rows, s.n, s.W, PM, t, sM, s.bias["b_mean"], s.bias["c_mean"])
    s = s._replace(m=m, V=V)
    base = float(elbo(s)[0])
    rng = np.random.default_rng(0)
    for i in (0, 5):
        for sgn in (1.0, -1.0):
            mm = np.array(m)
            mm[0, i] += sgn * 1e-3 * rng.normal(size=K)
            assert base - float(elbo(s._replace(m=jnp.asarray(mm)))[0]) > 1e-11 * abs(base)
            A = rng.normal(size=(K, K)) * 1e-2
            VV = np.array(V)
            VV[0, i] = VV[0, i] + sgn * 1e-2 * (A + A.T) @ VV[0, i]
            VV[0, i] = 0.5 * (VV[0, i] + VV[0, i].T)
            assert base - float(elbo(s._replace(V=jnp.asarray(VV)))[0]) > 1e-11 * abs(base)


# ----------------------------------------------------------------------------- closed forms
def test_nw_elbo_term_equals_murphy_evidence():
    """At the optimal ``q(mu, Lambda)`` the NW part of the ELBO is the log marginal
    likelihood of Murphy (2007, eq. 266) with the expected scatter:
    ``-(mK/2) log pi + log Gamma_K(nu*/2) - log Gamma_K(nu0/2) + (nu0/2) log|W0^{-1}|
    - (nu*/2) log|W*^{-1}| + (K/2) log(beta0/beta*)``."""
    rng = np.random.default_rng(3)
    prior = bmc.priors.NormalWishart(beta0=1.7, nu0=K + 1.5, W0_scale=0.6)
    mM, mN = 9, 6

    def moments(m):
        mean = rng.normal(size=(1, m, K)) + 0.4
        A = rng.normal(size=(1, m, K, K)) * 0.3
        return mean, A @ np.swapaxes(A, -1, -2) + 0.05 * np.eye(K)

    (aM, VM), (aN, VN) = moments(mM), moments(mN)
    stats = [prior.vb_factor_stats(jnp.asarray(a), jnp.asarray(V)) for a, V in ((aM, VM), (aN, VN))]
    q = prior.vb_step(stats[0], stats[1], mM, mN)
    term = float(prior.vb_elbo_term(q, stats[0], stats[1], mM, mN)[0])

    def evidence(a, V, m):
        x = a[0]
        s1, s2 = x.sum(0), x.T @ x + V[0].sum(0)
        beta0, nu0 = prior.beta0, prior.nu0
        W0inv = np.eye(K) / prior.W0_scale
        bn, nn = beta0 + m, nu0 + m
        xbar = s1 / m
        S = s2 - m * np.outer(xbar, xbar)
        Wninv = W0inv + S + beta0 * m / bn * np.outer(xbar, xbar)
        return (
            (
                -0.5 * m * K * math.log(math.pi)
                + multigammaln(nn / 2, K)
                - multigammaln(nu0 / 2, K)
                + 0.5 * nu0 * np.linalg.slogdet(W0inv)[1]
                - 0.5 * nn * np.linalg.slogdet(Wninv)[1]
                + 0.5 * K * math.log(beta0 / bn)
            ),
            Wninv,
            s1 / bn,
        )

    eM, WinvM, muM = evidence(aM, VM, mM)
    eN, _, _ = evidence(aN, VN, mN)
    np.testing.assert_allclose(term, eM + eN, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(q["Winv_M"][0]), WinvM, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(q["mu_M"][0]), muM, rtol=1e-12)
    # the rows see E[Lambda] = nu* W* and E[Lambda mu] = nu* W* mu*
    (EL, shift), _ = prior.vb_row_priors(q)
    EL_np = (prior.nu0 + mM) * np.linalg.inv(WinvM)
    np.testing.assert_allclose(np.asarray(EL[0]), EL_np, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(shift[0]), EL_np @ muM, rtol=1e-12)


def test_expected_sq_error_with_biases_matches_per_rating_formula():
    """``E[(R - M_i.N_j - b_i - c_j)^2] = (R - m_i.n_j - Eb_i - Ec_j)^2 + tr(V_i W_j)
    + m_i^T W_j m_i + n_j^T V_i n_j + Var b_i + Var c_j``, summed rating by rating."""
    data = _data(1)
    p = _problem(data)
    rng = np.random.default_rng(5)

    def cov(m):
        A = rng.normal(size=(m, K, K)) * 0.3
        return A @ np.swapaxes(A, -1, -2) + 0.05 * np.eye(K)

    m, n, V, W = rng.normal(size=(M1, K)), rng.normal(size=(M2, K)), cov(M1), cov(M2)
    b, c = rng.normal(size=M1), rng.normal(size=M2)
    vb_, vc = rng.random(M1) + 0.1, rng.random(M2) + 0.1
    bias = {
        "b_mean": b,
        "b_var": vb_,
        "c_mean": c,
        "c_var": vc,
        "sb_shape": 1.0,
        "sb_rate": 1.0,
        "sc_shape": 1.0,
        "sc_rate": 1.0,
    }
    f = lambda a: jnp.asarray(np.asarray(a, np.float64)[None])  # noqa: E731
    state = vb.VBState(
        m=f(m),
        V=f(V),
        n=f(n),
        W=f(W),
        inv_gamma=f(np.ones(K)),
        ES=f(np.zeros(K)),
        bias={k: f(v) for k, v in bias.items()},
    )
    got = float(vb.expected_sq_error(state, p.rows)[0])
    i, j, y = data.rows, data.cols, data.values
    want = np.sum(
        (y - np.sum(m[i] * n[j], 1) - b[i] - c[j]) ** 2
        + np.einsum("kab,kba->k", V[i], W[j])
        + np.einsum("ka,kab,kb->k", m[i], W[j], m[i])
        + np.einsum("ka,kab,kb->k", n[j], V[i], n[j])
        + vb_[i]
        + vc[j]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)


# ----------------------------------------------------------------------------- sharded
@pytest.mark.slow  # the default suite shards VB in test_sharding.py and test_hot_path.py
def test_sharded_equals_serial():
    """Four CPU devices (child process, rows padded: 43 x 30) against one; differences
    come only from the summation order of psums and all-gathered products: float64
    rounding carried through 12 iterations, bounded by ``sqrt(eps)`` as in
    ``test_sharding`` (a wrong row, padding or mask gives differences of order one)."""
    out = run_four_devices("vb-components", timeout=600)
    diffs = check_equal(out)
    assert {k.split("/")[0] for k in diffs} == {
        "nw-learned-bias",
        "ig-tempered-bias",
        "gamma-learned",
    }


# ----------------------------------------------------------------------------- bmc.fit
def _sim(seed=0, m1=60, m2=50, rank=2, noise_sd=0.5, frac=0.5, bias_sd=0.0):
    rng = np.random.default_rng(seed)
    U, Vt = rng.normal(size=(m1, rank)), rng.normal(size=(m2, rank))
    r, c = np.nonzero(rng.random((m1, m2)) < frac)
    bb, cc = bias_sd * rng.normal(size=m1), bias_sd * rng.normal(size=m2)
    theta = U @ Vt.T + bb[:, None] + cc[None, :]
    y = theta[r, c] + noise_sd * rng.normal(size=r.size)
    data = bmc.RatingData(r, c, y, (m1, m2))
    perm = rng.permutation(r.size)
    return data.subset(np.sort(perm[: int(0.8 * r.size)])), data.subset(
        np.sort(perm[int(0.8 * r.size) :])
    )


def test_fit_vb_with_biases_and_normal_wishart_end_to_end():
    train, test = _sim(bias_sd=1.0)
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.NormalWishart(),
        method="vb",
        likelihood=LearnedNoise(),
        biases=True,
        test=test,
        max_iter=60,
        tol=1e-9,
        progress_bar=False,
        seed=0,
        dtype=jnp.float64,
    )
    assert np.all(np.diff(fit.elbo) >= -1e-12 * np.abs(fit.elbo[1:]))
    # the predictions include the biases and the last trace point is their RMSE
    theta = (
        np.sum(fit.m[test.rows] * fit.n[test.cols], 1)
        + fit.row_bias[test.rows]
        + fit.col_bias[test.cols]
    )
    np.testing.assert_allclose(
        fit.predict(test.rows, test.cols), fit.info.shift.apply(theta), rtol=1e-12
    )
    np.testing.assert_allclose(fit.rmse(test), fit.rmse_trace[-1], rtol=1e-10)
    # the biases help: better than the same model without them, and far below the data sd
    plain = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.NormalWishart(),
        method="vb",
        likelihood=LearnedNoise(),
        test=test,
        max_iter=60,
        tol=1e-9,
        progress_bar=False,
        seed=0,
        dtype=jnp.float64,
    )
    assert fit.rmse(test) < plain.rmse(test)
    assert fit.rmse(test) < 0.5 * np.std(test.values)
    # NW has no gamma: q_gamma says so, q_prior has q(mu, Lambda)
    assert {"mu_M", "beta_M", "nu_M", "W_M", "E_Lambda_M", "mu_N", "W_N"} <= set(fit.q_prior)
    with pytest.raises(ValueError, match="no column scales"):
        fit.q_gamma["inv_mean"]
    assert set(fit.q_noise) == {"shape", "rate", "mean", "inv_mean"}


def test_fit_vb_inverse_gamma_tempered_biases_float32():
    train, test = _sim(seed=1, bias_sd=1.0)
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.InverseGamma(1.0, 0.1),
        method="vb",
        biases=Biases(a=2.0, b=1.0),
        noise_sd=0.5,
        test=test,
        max_iter=40,
        progress_bar=False,
        seed=0,
    )
    assert np.all(np.isfinite(fit.elbo)) and fit.q_gamma["inv_mean"].shape == (3,)
    assert fit.row_bias.shape == (60,) and fit.col_bias.shape == (50,)
    assert fit.rmse(test) < 0.5 * np.std(test.values)


def test_learned_noise_recovers_the_noise_level():
    """Simulated rank-2 data with noise sd 0.5 (n = 4800 training ratings of 100 x 80).
    ``E_q[1/tau]`` estimates sigma^2 = 0.25; its sampling error is ~sqrt(2/n) = 2% and
    the fitted factors absorb a fraction of order (m1 + m2) K / n ~ 10% of the noise
    (partly put back by the posterior variances in E[SSE]), so a 15% relative tolerance
    on sigma^2 separates the right level from e.g. the data variance (~2.2) or the
    prior mean 1."""
    train, test = _sim(seed=2, m1=100, m2=80, noise_sd=0.5, frac=0.75)
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.InverseGamma(1.0, 0.1),
        method="vb",
        likelihood=LearnedNoise(),
        test=test,
        max_iter=200,
        tol=1e-10,
        progress_bar=False,
        seed=0,
        dtype=jnp.float64,
    )
    sigma2 = float(fit.q_noise["inv_mean"])
    assert abs(sigma2 / 0.25 - 1.0) < 0.15, sigma2


@pytest.mark.slow  # VB resume is exact in the default suite (test_checkpoint.py); here with every new component
def test_vb_checkpoint_resumes_exactly_with_the_new_state(tmp_path):
    train, test = _sim(seed=3, m1=30, m2=25, bias_sd=1.0)
    kw = dict(
        K=3,
        prior=bmc.priors.NormalWishart(),
        method="vb",
        likelihood=LearnedNoise(temper=0.8),
        biases=True,
        tol=0.0,
        num_chains=2,
        progress_bar=False,
        seed=4,
        test=test,
        dtype=jnp.float64,
    )
    ck = tmp_path / "vb.npz"
    bmc.fit(train, max_iter=5, checkpoint=ck, checkpoint_every=5, **kw)
    with np.load(ck) as f:
        names = set(f.files)
    assert {"state/prior/Winv_M", "state/noise/rate", "state/bias/c_mean"} <= names
    assert "state/inv_gamma" not in names
    resumed = bmc.fit(train, max_iter=11, checkpoint=ck, checkpoint_every=5, **kw)
    straight = bmc.fit(train, max_iter=11, **kw)
    np.testing.assert_array_equal(resumed.elbo, straight.elbo)
    np.testing.assert_array_equal(resumed.m, straight.m)
    np.testing.assert_array_equal(resumed.row_bias, straight.row_bias)
    np.testing.assert_array_equal(resumed.q_noise["rate"], straight.q_noise["rate"])
    # a checkpoint of another model is refused
    with pytest.raises(ValueError, match="biases|likelihood"):
        bmc.fit(train, max_iter=11, checkpoint=ck, **{**kw, "biases": False})
