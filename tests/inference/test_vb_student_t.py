"""Mean-field VB of the Student-t likelihood: ``q(w)`` kept at its optimum given ``q(theta)``
and ``q(tau)``, the Gaussian updates with each rating's precision ``E[tau] E[w_k]``, then
``q(tau)`` (docs/algorithms.md, "Student-t noise").

What is checked (float64):

* **CAVI never decreases the ELBO** (inverse gamma with and without biases, Normal-Wishart
  with biases; two runs each); tolerance a relative 1e-12 of |ELBO|, as in
  ``test_vb_components``.
* **The fixed point is an optimum**: after 300 iterations (converged), moving ``q(tau)``'s
  shape or rate, a row's mean or a bias's mean by a small step in either direction lowers
  the ELBO (loss ~1e-6 times the curvature, far above rounding).
* **Per-rating expected squared error** ``E_q[(Y_k - theta_k)^2]`` equals the formula
  written out in numpy.
* **The ELBO's likelihood term** with ``q(w)`` optimal equals the bound computed by
  quadrature over ``w`` for one rating.
* ``bmc.fit(method="vb")`` with planted outliers predicts the clean signal better than the
  Gaussian member and says its noise variance is ``nu / (nu - 2) E[1/tau]``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

import bmczoo as bmc
from bmczoo.inference import vb
from bmczoo.inference.gibbs import build_problem
from bmczoo.inference.vb import cavi

M1, M2, K = 12, 10, 2
LIK = bmc.likelihoods.StudentT(nu=4.0, a=2.0, b=1.0)
PRIORS = {"inverse-gamma": bmc.priors.InverseGamma(), "normal-wishart": bmc.priors.NormalWishart()}


pytestmark = pytest.mark.usefixtures("x64")


def _data(seed=0):
    rng = np.random.default_rng(seed)
    r, c = np.nonzero(rng.random((M1, M2)) < 0.5)
    U, Vt = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    y = np.sum(U[r] * Vt[c], axis=1) + 0.4 * rng.standard_t(3.0, size=r.size)
    return bmc.RatingData(r, c, y, (M1, M2))


def _runner(prior, biases):
    p = build_problem(_data(), 1.0, dtype=jnp.float64, likelihood=LIK)
    kw = dict(likelihood=LIK, biases=biases, latent=(p.levels, p.col_perm))

    @jax.jit
    def step(state):
        state = vb.update(state, p.rows, p.cols, prior, None, **kw)
        return state, vb.elbo(state, p.rows, prior, None, **kw)

    return p, step, jax.jit(lambda s: vb.elbo(s, p.rows, prior, None, **kw))


def _start(prior, biases, C=2):
    keys = jax.random.split(jax.random.key(1), C)
    return vb.init(keys, (M1, M2), prior, K, jnp.float64, likelihood=LIK, biases=biases)


@pytest.mark.parametrize(
    "prior, biases",
    [("inverse-gamma", False), ("inverse-gamma", True), ("normal-wishart", True)],
)
def test_elbo_never_decreases(prior, biases):
    prior, b = PRIORS[prior], bmc.offsets.Biases() if biases else None
    _, step, _ = _runner(prior, b)
    state, trace = _start(prior, b), []
    for _ in range(30):
        state, e = step(state)
        trace.append(np.asarray(e))
    trace = np.array(trace)
    assert np.all(np.isfinite(trace))
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= 1e-12 * np.abs(trace[1:])), drops.max()


def _perturbed(elbo, state, field, key, index, step=1e-3, log=False):
    out = []
    for sgn in (1.0, -1.0):
        x = getattr(state, field)
        if isinstance(x, dict):
            d = dict(x)
            a = np.array(d[key])
            a[index] = a[index] * math.exp(sgn * step) if log else a[index] + sgn * step
            d[key] = jnp.asarray(a)
            moved = state._replace(**{field: d})
        else:
            a = np.array(x)
            a[index] = a[index] + sgn * step
            moved = state._replace(**{field: jnp.asarray(a)})
        out.append(float(elbo(moved)[0]))
    return out


def test_fixed_point_is_an_optimum():
    b = bmc.offsets.Biases()
    _, step, elbo = _runner(PRIORS["inverse-gamma"], b)
    state = _start(PRIORS["inverse-gamma"], b, C=1)
    for _ in range(300):
        state, _ = step(state)
    base = float(elbo(state)[0])
    moves = [
        _perturbed(elbo, state, "noise", "shape", 0, log=True),
        _perturbed(elbo, state, "noise", "rate", 0, log=True),
        _perturbed(elbo, state, "m", None, (0, 1, 0)),
        _perturbed(elbo, state, "n", None, (0, 2, 1)),
        _perturbed(elbo, state, "bias", "b_mean", (0, 3)),
    ]
    for others in moves:
        for o in others:
            assert base - o > 1e-11 * abs(base), (base, others)


def test_rating_expected_sq_matches_the_formula():
    b = bmc.offsets.Biases()
    p, step, _ = _runner(PRIORS["inverse-gamma"], b)
    state = _start(PRIORS["inverse-gamma"], b)
    for _ in range(3):
        state, _ = step(state)
    got = np.asarray(cavi.rating_expected_sq(state, p.rows, chunk=7))  # chunks not dividing n
    s = jax.tree.map(np.asarray, state)
    order = np.asarray(_data().row_view.order)
    rows, cols = np.asarray(_data().rows)[order], np.asarray(_data().cols)[order]
    y = np.asarray(_data().values)[order]
    for c in range(2):
        m, V, n, W = s.m[c][rows], s.V[c][rows], s.n[c][cols], s.W[c][cols]
        mean = np.sum(m * n, 1) + s.bias["b_mean"][c][rows] + s.bias["c_mean"][c][cols]
        second = np.einsum(
            "kab,kab->k", V + np.einsum("ka,kb->kab", m, m), W + np.einsum("ka,kb->kab", n, n)
        )
        var = second - np.sum(m * n, 1) ** 2 + s.bias["b_var"][c][rows] + s.bias["c_var"][c][cols]
        np.testing.assert_allclose(got[c], (y - mean) ** 2 + var, rtol=1e-12)


def test_elbo_likelihood_term_is_the_integrated_bound():
    """One rating, ``q(tau)`` given: the term with ``q(w)`` optimal is
    ``log int p(w) exp(E[log N(y | theta, 1/(tau w))]) dw`` (quadrature), plus the
    ``q(tau)`` terms (those of LearnedNoise with temper 1 and no data)."""
    q = {"shape": jnp.array([3.5]), "rate": jnp.array([2.0])}
    e = jnp.array([[0.7]])
    got = float(LIK.vb_weighted_elbo_term(q, e)[0])
    Et, Elog = 3.5 / 2.0, special.digamma(3.5) - math.log(2.0)

    def integrand(w):
        inner = 0.5 * (Elog + math.log(w) - math.log(2 * math.pi)) - 0.5 * Et * w * 0.7
        return stats.gamma.pdf(w, LIK.nu / 2, scale=2 / LIK.nu) * math.exp(inner)

    bound = math.log(integrate.quad(integrand, 0, np.inf)[0])
    noise = bmc.likelihoods.LearnedNoise(a=LIK.a, b=LIK.b)
    tau_terms = float(noise.vb_elbo_term(q, 0, jnp.zeros(1), None)[0])
    assert got == pytest.approx(bound + tau_terms, rel=1e-9)


def test_fit_vb_is_robust_to_outliers():
    rng = np.random.default_rng(3)
    m1, m2 = 60, 50
    U, Vt = rng.normal(size=(m1, 2)), rng.normal(size=(m2, 2))
    r, c = np.nonzero(rng.random((m1, m2)) < 0.4)
    theta = np.sum(U[r] * Vt[c], axis=1)
    y = theta + 0.3 * rng.normal(size=r.size)
    y[rng.choice(r.size, r.size // 50, replace=False)] += 15.0  # 2% far-off ratings
    data = bmc.RatingData(r, c, y, (m1, m2))
    kw = dict(K=3, prior=bmc.priors.InverseGamma(), method="vb", seed=0, progress_bar=False)
    student = bmc.fit(data, likelihood=bmc.likelihoods.StudentT(nu=4.0), **kw)
    gauss = bmc.fit(data, likelihood=bmc.likelihoods.LearnedNoise(), **kw)
    truth = U @ Vt.T

    def err(f):
        rr, cc = np.nonzero(np.ones((m1, m2)))
        return np.sqrt(np.mean((f.predict(rr, cc) - truth[rr, cc]) ** 2))

    assert err(student) < 0.5 * err(gauss), (err(student), err(gauss))
    inv = float(student.q_noise["inv_mean"])
    assert student.noise_var() == pytest.approx(inv * 4.0 / 2.0, rel=1e-12)
