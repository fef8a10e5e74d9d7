"""Mean-field VB of the feature-driven biases (:mod:`bmczoo.offsets.bias_link_vb`; docs/algorithms.md,
"Biases"): each update against the dense formula in float64, the ELBO's gradient zero in
each updated block (the update is the optimum of the ELBO term it changes), the ELBO never
decreasing along a fit, and cold-start / fold-in predictions from ``x^T E[w]``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.offsets import bias_link_vb as bvb

from .test_bias_link_fit import BIASES, M1, PRIOR, _problem

pytestmark = pytest.mark.usefixtures("x64")

RNG = np.random.default_rng(5)
M, F = 7, 9  # more features than rows: a null space
X = RNG.normal(size=(M, F)) * (RNG.random((M, F)) < 0.6)
B = bmc.offsets.Biases(a=2.0, b=1.5, row_features=bmc.data.Features.from_dense(X), a_w=3.0, b_w=0.5)


def _wrapper():
    data = bmc.RatingData([0], [0], [1.0], (M, 2))
    return bvb.VBBiasLink(B, B.gibbs_links(data, jnp.float64))


def _q(vb, rng):
    """A q-state of the row side (C = 1) at arbitrary values, and its sums."""
    q = vb.vb_state(M, 2, 1, jnp.float64)
    q["b_mean"], q["b_var"] = jnp.asarray(rng.normal(size=(1, M))), jnp.asarray(rng.random((1, M)))
    q["sb_shape"], q["sb_rate"] = jnp.asarray([3.1]), jnp.asarray([1.7])
    q["blam_shape"], q["blam_rate"] = jnp.asarray([2.2]), jnp.asarray([0.9])
    q["bw_mean"] = jnp.asarray(rng.normal(size=(1, F)))
    q["bw_var"] = jnp.asarray(0.1 + rng.random((1, F)))
    sums = {
        "b_sq": jnp.sum(q["b_mean"] ** 2 + q["b_var"], -1),
        "b_logvar": jnp.sum(jnp.log(q["b_var"]), -1),
        "c_sq": jnp.sum(q["c_mean"] ** 2 + q["c_var"], -1),
        "c_logvar": jnp.zeros(1),
    }
    return q, sums


def test_updates_match_the_dense_formulas():
    vb = _wrapper()
    link = vb.sides["b"]
    V = np.asarray(link["V"])
    q, sums = _q(vb, np.random.default_rng(0))
    Einv = float(q["sb_shape"][0] / q["sb_rate"][0])
    Elam = float(q["blam_shape"][0] / q["blam_rate"][0])
    w_mean, w_var = bvb.w_update(
        link, q["b_mean"], q["sb_shape"] / q["sb_rate"], jnp.asarray([Elam])
    )
    A = X.T @ X + Elam * np.eye(F)
    Eb = np.asarray(q["b_mean"][0])
    np.testing.assert_allclose(V @ np.asarray(w_mean[0]), np.linalg.solve(A, X.T @ Eb), atol=1e-12)
    np.testing.assert_allclose(
        V @ np.diag(np.asarray(w_var[0])) @ V.T, np.linalg.inv(A) / Einv, atol=1e-12
    )
    # E||b - X w||^2 and E||w||^2 under q(b) q(w), dense
    Ew, Cw = V @ np.asarray(w_mean[0]), V @ np.diag(np.asarray(w_var[0])) @ V.T
    Eb2 = float(sums["b_sq"][0])
    resid = Eb2 - 2 * Eb @ X @ Ew + np.trace(X.T @ X @ (np.outer(Ew, Ew) + Cw))
    Ew2 = Ew @ Ew + np.trace(Cw)
    got = bvb.expected_resid_sq(link, q["b_mean"], sums["b_sq"], w_mean, w_var)
    np.testing.assert_allclose(float(got[0]), resid, rtol=1e-12)
    shape, rate = bvb.lam_update(B.a_w, B.b_w, (F, jnp.asarray([Ew2])), jnp.asarray([Einv]))
    np.testing.assert_allclose(
        [float(shape[0]), float(rate[0])], [B.a_w + F / 2, B.b_w + Einv * Ew2 / 2]
    )
    shape, rate = bvb.variance_update(
        B.a, B.b, M, jnp.asarray([resid]), (F, jnp.asarray([Ew2])), jnp.asarray([Elam])
    )
    np.testing.assert_allclose(
        [float(shape[0]), float(rate[0])], [B.a + (M + F) / 2, B.b + (resid + Elam * Ew2) / 2]
    )


def test_prior_means_and_bias_update():
    vb = _wrapper()
    q, _ = _q(vb, np.random.default_rng(1))
    mb, mc = vb.vb_prior_means(q)
    assert mc is None
    Ew = np.asarray(vb.sides["b"]["V"]) @ np.asarray(q["bw_mean"][0])
    np.testing.assert_allclose(np.asarray(mb[0]), X @ Ew, atol=1e-12)
    counts, resid, tau = (
        jnp.asarray([[0.0, 2, 1, 0, 3, 1, 1]]),
        jnp.asarray(RNG.normal(size=(1, M))),
        1.3,
    )
    mean, var = vb.vb_bias_update(resid, counts, tau, q["sb_shape"], q["sb_rate"], mb)
    Einv = float(q["sb_shape"][0] / q["sb_rate"][0])
    p = Einv + tau * np.asarray(counts[0])
    np.testing.assert_allclose(np.asarray(var[0]), 1 / p, rtol=1e-13)
    np.testing.assert_allclose(
        np.asarray(mean[0]), (Einv * X @ Ew + tau * np.asarray(resid[0])) / p, rtol=1e-12
    )


@pytest.mark.parametrize("block", ["w", "lam", "s"])
def test_each_update_zeroes_the_elbo_gradient_of_its_block(block):
    """The ELBO depends on ``q(w)``, ``q(lam_w)``, ``q(s^2)`` only through the biases' term:
    right after a block's update (the others held), its gradient there is zero."""
    vb = _wrapper()
    link = vb.sides["b"]
    q, sums = _q(vb, np.random.default_rng(2))
    Einv, Elam = q["sb_shape"] / q["sb_rate"], q["blam_shape"] / q["blam_rate"]
    if block == "w":
        q["bw_mean"], q["bw_var"] = bvb.w_update(link, q["b_mean"], Einv, Elam)
        keys = ("bw_mean", "bw_var")
    elif block == "lam":
        w_sq = (F, jnp.sum(q["bw_mean"] ** 2 + q["bw_var"], -1))
        q["blam_shape"], q["blam_rate"] = bvb.lam_update(B.a_w, B.b_w, w_sq, Einv)
        keys = ("blam_shape", "blam_rate")
    else:
        w_sq = (F, jnp.sum(q["bw_mean"] ** 2 + q["bw_var"], -1))
        resid = bvb.expected_resid_sq(link, q["b_mean"], sums["b_sq"], q["bw_mean"], q["bw_var"])
        q["sb_shape"], q["sb_rate"] = bvb.variance_update(B.a, B.b, M, resid, w_sq, Elam)
        keys = ("sb_shape", "sb_rate")

    def term(params):
        return jnp.sum(vb.vb_elbo_term({**q, **params}, M, 2, sums))

    grads = jax.grad(term)({k: q[k] for k in keys})
    for k in keys:
        scale = max(1.0, float(jnp.max(jnp.abs(q[k]))))
        np.testing.assert_allclose(np.asarray(grads[k]), 0.0, atol=1e-9 * scale, err_msg=k)


@pytest.fixture(scope="module")
def vb_fit():
    train, new = _problem()
    fit = bmc.fit(
        train,
        K=2,
        method="vb",
        prior=PRIOR,
        biases=BIASES,
        max_iter=40,
        tol=0.0,
        progress_bar=False,
        dtype="float64",
        seed=0,
        clip=False,
    )
    return fit, new


def test_elbo_never_decreases(vb_fit):
    fit, _ = vb_fit
    e = np.asarray(fit.elbo, np.float64).ravel()
    assert e.size == 40
    # rounding only: a few ulps of the ELBO's terms
    assert np.all(np.diff(e) >= -1e-10 * np.abs(e[1:])), np.diff(e).min()


def test_cold_rows_and_fold_in_use_the_features(vb_fit):
    fit, new = vb_fit
    Ew = np.asarray(fit.q_biases["bw"], np.float64)
    # a cold row's q(b_i) is its prior given q(w) (of the previous iteration: the biases are
    # updated before w), so its mean is not zero: it follows the features
    cold = np.arange(M1 - 4, M1)
    assert np.all(np.abs(np.asarray(fit.q_biases["b_mean"])[cold]) > 0)
    folded = fit.fold_in(new)
    # new row 0 has no rating: E[theta] = E[M_u] . E[N_j] + x_u^T E[w] + E[c_j], E[M_u] = 0
    x0 = new.row_features.to_dense()[0]
    ref = x0 @ Ew + float(np.asarray(fit.q_biases["c_mean"])[3]) + fit.info.shift.offset
    np.testing.assert_allclose(folded.predict([0], [3]), [ref], rtol=1e-10)
