"""Mean-field VB of the one-class likelihood with row and column biases ``theta_ij = M_i.N_j
+ b_i + c_j`` (docs/algorithms.md, "One-class likelihood in VB"; no global mean).

What is checked (float64 unless said otherwise):

* **The updates are exact**: one CAVI iteration's ``q(M)``, ``q(N)``, ``q(b)`` and
  ``q(c)`` (each given the others' current q, in the update's order) equal the dense
  Gaussians over every pair of the matrix (preferences and confidences as full ``m1 x m2``
  arrays, the targets minus the biases' means).
* **The ELBO agrees with the updates**: with the fixed prior its gradient in ``q(b)``
  (means and variances) is zero right after the biases' update, and in ``q(c)`` after
  the column biases' update.
* **The ELBO's expected log-likelihood** equals the dense expectation over every pair
  (``E[theta_ij^2]`` with the biases' means and variances) to rounding, and a Monte Carlo
  estimate from draws of ``q`` within ``z_crit`` standard errors.
* **CAVI never decreases the ELBO** (inverse-gamma, Normal-Wishart).
* ``bmc.fit(method="vb", biases=True)`` in float32 and float64: finite, non-decreasing
  ELBO trace; a saved fit predicts the same bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.inference import vb
from bmczoo.inference.vb.elbo import all_pairs_loglik

from tests.likelihoods.test_one_class_vb import (
    LIK,
    M1,
    M2,
    PRIORS,
    Z_CRIT,
    K,
    _data,
    _dense,
    _dense_update,
    _problem,
    _row_prior,
    _state,
)

BIASES = bmc.offsets.Biases(a=3.0, b=2.0)


def _bias_state(prior, C=1, seed=1):
    """:func:`_state` with biases: random means, variances and ``q(s^2)``."""
    rng = np.random.default_rng(seed + 7)
    st = _state(prior, C, seed)
    q = BIASES.vb_state(M1, M2, C, jnp.float64)
    q.update(
        b_mean=rng.normal(size=(C, M1)),
        b_var=rng.uniform(0.1, 0.5, (C, M1)),
        c_mean=rng.normal(size=(C, M2)),
        c_var=rng.uniform(0.1, 0.5, (C, M2)),
        sb_shape=np.full(C, 4.0),
        sb_rate=rng.uniform(1.0, 3.0, C),
        sc_shape=np.full(C, 5.0),
        sc_rate=rng.uniform(1.0, 3.0, C),
    )
    return st._replace(bias={k: jnp.asarray(v) for k, v in q.items()})


def _update(prior, p, st):
    kw = dict(likelihood=LIK, biases=BIASES)
    return jax.jit(lambda s: vb.update(s, p.rows, p.cols, prior, p.tau, **kw))(st)


def _dense_bias(P, C, m, n, other_bias, shape, rate):
    """The optimal ``q`` of one side's biases (mean, variance) given the means ``m`` of
    its rows, ``n`` of the other factor and the other side's biases' means."""
    prec = shape / rate + LIK.lam * C.sum(axis=1)
    resid = P - m @ n.T - other_bias[None, :]
    return LIK.lam * np.sum(C * resid, axis=1) / prec, 1.0 / prec


@pytest.mark.parametrize("prior", ["inverse-gamma", "normal-wishart"])
def test_updates_are_the_dense_gaussians(x64, prior):
    prior = PRIORS[prior]
    data = _data()
    p, (P, C) = _problem(data), _dense(data)
    st = _bias_state(prior)
    new = _update(prior, p, st)
    q = {k: np.asarray(v[0]) for k, v in st.bias.items()}
    b, c = q["b_mean"], q["c_mean"]
    (PM, sM), (PN, sN) = prior.vb_row_priors(vb.prior_q(st))
    T = P - b[:, None] - c[None, :]  # the rows' targets: the preferences minus the biases
    m, V = _dense_update(T, C, np.asarray(st.n[0]), np.asarray(st.W[0]), *_row_prior(PM, sM))
    n, W = _dense_update(T.T, C.T, m, V, *_row_prior(PN, sN))
    for got, want in ((new.m, m), (new.V, V), (new.n, n), (new.W, W)):
        np.testing.assert_allclose(got[0], want, rtol=1e-10, atol=1e-12)
    bm, bv = _dense_bias(P, C, m, n, c, q["sb_shape"], q["sb_rate"])
    cm, cv = _dense_bias(P.T, C.T, n, m, bm, q["sc_shape"], q["sc_rate"])
    for key, want in (("b_mean", bm), ("b_var", bv), ("c_mean", cm), ("c_var", cv)):
        np.testing.assert_allclose(new.bias[key][0], want, rtol=1e-10, atol=1e-12)


def test_bias_updates_zero_the_elbo_gradient(x64):
    """Fixed prior: ``q(b)`` is optimal given the new ``q(M)``, ``q(N)`` and the starting
    ``q(c)``, ``q(s_b^2)``; ``q(c)`` given the new ``q(b)`` too."""
    prior = PRIORS["fixed"]
    data = _data()
    p = _problem(data)
    st = _bias_state(prior, C=2)
    new = _update(prior, p, st)
    kw = dict(likelihood=LIK, biases=BIASES)

    def grads(state, side):
        def f(mean, var):
            bias = {**state.bias, f"{side}_mean": mean, f"{side}_var": var}
            return jnp.sum(vb.elbo(state._replace(bias=bias), p.rows, prior, p.tau, **kw))

        q = state.bias
        return jax.grad(f, argnums=(0, 1))(q[f"{side}_mean"], q[f"{side}_var"])

    factors = st._replace(m=new.m, V=new.V, n=new.n, W=new.W)
    keys_b = ("b_mean", "b_var")
    after_b = factors._replace(bias={**st.bias, **{k: new.bias[k] for k in keys_b}})
    after_c = after_b._replace(
        bias={**after_b.bias, "c_mean": new.bias["c_mean"], "c_var": new.bias["c_var"]}
    )
    for state, side in ((after_b, "b"), (after_c, "c")):
        for g in grads(state, side):
            np.testing.assert_allclose(np.asarray(g), 0.0, atol=1e-10)
    # and not zero before the update (the check has power)
    assert np.abs(np.asarray(grads(factors, "b")[0])).max() > 1e-2


def test_expected_loglik_is_the_dense_expectation_and_monte_carlo(x64):
    data = _data()
    p, (P, C) = _problem(data), _dense(data)
    st = _bias_state(PRIORS["fixed"])
    got = float(all_pairs_loglik(st, p.rows, LIK, p.tau)[0][0])
    m, V, n, W = (np.asarray(x[0]) for x in (st.m, st.V, st.n, st.W))
    q = {k: np.asarray(v[0]) for k, v in st.bias.items()}
    A = V + np.einsum("ik,il->ikl", m, m)
    B = W + np.einsum("jk,jl->jkl", n, n)
    bc = q["b_mean"][:, None] + q["c_mean"][None, :]
    e_theta = m @ n.T + bc
    e_theta2 = np.einsum("ikl,jkl->ij", A, B) + 2 * (m @ n.T) * bc + bc**2
    e_theta2 = e_theta2 + q["b_var"][:, None] + q["c_var"][None, :]
    wsse = np.sum(C * (P**2 - 2 * P * e_theta + e_theta2))
    dense = 0.5 * np.sum(np.log(LIK.lam * C / (2 * np.pi))) - 0.5 * LIK.lam * wsse
    assert got == pytest.approx(dense, rel=1e-12)
    rng = np.random.default_rng(4)
    S = 20000
    M = m + np.einsum("ikl,sil->sik", np.linalg.cholesky(V), rng.normal(size=(S, M1, K)))
    N = n + np.einsum("jkl,sjl->sjk", np.linalg.cholesky(W), rng.normal(size=(S, M2, K)))
    b = q["b_mean"] + np.sqrt(q["b_var"]) * rng.normal(size=(S, M1))
    c = q["c_mean"] + np.sqrt(q["c_var"]) * rng.normal(size=(S, M2))
    theta = np.einsum("sik,sjk->sij", M, N) + b[:, :, None] + c[:, None, :]
    val = stats.norm.logpdf(P, theta, 1.0 / np.sqrt(LIK.lam * C)).sum(axis=(1, 2))
    se = val.std(ddof=1) / np.sqrt(S)
    assert abs(val.mean() - got) < Z_CRIT * se, (val.mean(), got, se)


@pytest.mark.parametrize("prior", ["inverse-gamma", "normal-wishart"])
def test_elbo_never_decreases(x64, prior):
    prior = PRIORS[prior]
    p = _problem(_data(seed=2))
    kw = dict(likelihood=LIK, biases=BIASES)

    @jax.jit
    def step(state):
        state = vb.update(state, p.rows, p.cols, prior, p.tau, **kw)
        return state, vb.elbo(state, p.rows, prior, p.tau, **kw)

    keys = jax.random.split(jax.random.key(1), 2)
    state = vb.init(keys, (M1, M2), prior, K, jnp.float64, biases=BIASES)
    trace = []
    for _ in range(30):
        state, e = step(state)
        trace.append(np.asarray(e))
    trace = np.array(trace)
    assert np.all(np.isfinite(trace))
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= 1e-12 * np.abs(trace[1:])), drops.max()


def test_fit_with_biases_runs_and_saves(tmp_path, dtype):
    data = _data(seed=3)
    fit = bmc.fit(
        data,
        K=2,
        prior=bmc.priors.InverseGamma(),
        likelihood=LIK,
        biases=True,
        method="vb",
        max_iter=60,
        seed=0,
        progress_bar=False,
        dtype=dtype,
    )
    assert fit.info.dtype == np.dtype(dtype).name
    e = np.asarray(fit.elbo)
    assert np.all(np.isfinite(e))
    rounding = 1e-5 if dtype == np.float32 else 1e-12
    assert np.all(np.diff(e) >= -rounding * np.abs(e[1:]))
    fit.save(tmp_path / "one_class_biases_vb.npz")
    back = bmc.load(tmp_path / "one_class_biases_vb.npz")
    r, c = np.divmod(np.arange(M1 * M2), M2)
    score = fit.predict(r, c)
    assert np.all(np.isfinite(score))
    assert np.array_equal(score, back.predict(r, c))
