"""Mean-field VB of the Normal-Wishart prior's feature link (Macau, docs/algorithms.md,
"Feature links (side information)";
:class:`bmczoo.priors.macau.VBLink`).

* Each new coordinate update (``q(B)``, ``q(lam_B)``, ``q(mu, Lambda)`` with the
  residuals, the rows' ``q(M_i)`` with per-row prior means) equals the dense formula in
  float64 on a tiny problem, and the ELBO's gradient in the updated block's parameters is
  zero right after the update (the update is the block's optimum *of this ELBO*: a wrong
  term in either the update or the ELBO breaks it).
* CAVI never decreases the ELBO with features (alone, with implicit feedback, with learned
  noise and biases, with the ordered probit).
* On data whose rows' factors are a linear function of their features, VB with the link
  predicts held-out ratings better than VB without it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import vb
from bmczoo.inference.gibbs import build_problem
from bmczoo.likelihoods import LearnedNoise, OrderedProbit
from bmczoo.priors import macau

pytestmark = pytest.mark.usefixtures("x64")

M, F, K = 7, 4, 2
RTOL = 1e-9  # float64 rounding of O(F^3) operations on O(1) numbers


def _tiny(seed=0):
    """A feature table with a singular ``X^T X`` and a featureless row, the rows' expected
    moments and a q-state of the other blocks."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(M, F))
    X[:, 3] = X[:, 0] + X[:, 1]
    X[2] = 0.0
    feats = bmc.data.Features.from_dense(X)
    link = macau.link_arrays(feats, jnp.float64)
    m = rng.normal(size=(M, K))
    Vr = np.stack([0.1 * (R @ R.T) for R in rng.normal(size=(M, K, K))])
    mu = rng.normal(size=K)
    R = rng.normal(size=(K, K))
    Winv = R @ R.T + K * np.eye(K)
    nu = K + 3.5
    lam = 0.7
    return dict(
        X=feats.to_dense(), link=link, m=m, Vr=Vr, mu=mu, Winv=Winv, nu=nu, lam=lam, beta=2.5
    )


def _stats(t):
    m, Vr, X, V = t["m"], t["Vr"], t["X"], np.asarray(t["link"]["V"])
    return m.sum(0), m.T @ m + Vr.sum(0), V.T @ (X.T @ m)


def _EL(t):
    return t["nu"] * np.linalg.inv(t["Winv"])


def _dense_q_B(t):
    """``q(B) = MN(A^{-1} X^T (m - 1 mu^T), A^{-1}, E[Lambda]^{-1})``, ``A = X^T X + E[lam] I``."""
    X = t["X"]
    A = X.T @ X + t["lam"] * np.eye(F)
    mean = np.linalg.solve(A, X.T @ (t["m"] - t["mu"][None, :]))
    return mean, np.linalg.inv(A), np.linalg.inv(_EL(t))


def _b_update(t):
    Gt = _stats(t)[2]
    return macau.vb_b_update(
        t["link"], jnp.asarray(t["mu"]), jnp.asarray(_EL(t)), t["lam"], jnp.asarray(Gt)
    )


def test_q_B_is_the_dense_matrix_normal():
    t = _tiny()
    Bt, a, U = _b_update(t)
    V = np.asarray(t["link"]["V"])
    mean, row_cov, col_cov = _dense_q_B(t)
    np.testing.assert_allclose(V @ np.asarray(Bt), mean, rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(
        V @ np.diag(1.0 / np.asarray(a)) @ V.T, row_cov, rtol=RTOL, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(U), col_cov, rtol=RTOL, atol=1e-12)


def _dense_EBB(t):
    mean, row_cov, col_cov = _dense_q_B(t)
    return mean.T @ mean + np.trace(row_cov) * col_cov


def test_q_lam_is_the_dense_gamma():
    t = _tiny()
    Bt, a, U = _b_update(t)
    shape, rate = macau.vb_lam_update(t["link"], Bt, a, U, jnp.asarray(_EL(t)), 1.5, 0.5)
    assert float(shape) == 1.5 + 0.5 * F * K
    np.testing.assert_allclose(float(rate), 0.5 + 0.5 * np.trace(_EL(t) @ _dense_EBB(t)), rtol=RTOL)


def test_q_mu_lambda_is_the_dense_normal_wishart_of_the_residuals():
    t = _tiny()
    s1, s2, Gt = _stats(t)
    Bt, a, U = _b_update(t)
    lam_new = 1.3
    W0_inv = np.eye(K) / 0.8
    beta0, nu0 = 2.0, K + 1.0
    mu, beta, nu, Winv = macau.vb_nw_link_update(
        t["link"],
        macau.LinkQ(Bt, a, U),
        lam_new,
        macau.LinkRows(jnp.asarray(s1), jnp.asarray(s2), jnp.asarray(Gt)),
        M,
        beta0,
        nu0,
        jnp.asarray(W0_inv),
    )
    # dense: E[e] and E[e e^T] of e_i = M_i - B^T x_i under q(M) q(B), summed over rows
    X, m = t["X"], t["m"]
    Bm, row_cov, col_cov = _dense_q_B(t)
    Ee = m - X @ Bm
    S_e = (
        m.T @ m
        + t["Vr"].sum(0)
        - Bm.T @ X.T @ m
        - m.T @ X @ Bm
        + Bm.T @ X.T @ X @ Bm
        + np.trace(X.T @ X @ row_cov) * col_cov
    )
    ebar = Ee.mean(0)
    scatter = S_e - M * np.outer(ebar, ebar)
    beta_star = beta0 + M
    np.testing.assert_allclose(np.asarray(mu), M * ebar / beta_star, rtol=RTOL, atol=1e-12)
    assert float(beta) == beta_star and float(nu) == nu0 + M + F
    expected = (
        W0_inv + scatter + beta0 * M / beta_star * np.outer(ebar, ebar) + lam_new * _dense_EBB(t)
    )
    np.testing.assert_allclose(np.asarray(Winv), expected, rtol=RTOL, atol=1e-10)


def _elbo_at(t, s1, s2, Gt, **over):
    args = dict(
        mu=jnp.asarray(t["mu"]),
        beta=jnp.asarray(t["beta"]),
        nu=jnp.asarray(t["nu"]),
        Winv=jnp.asarray(t["Winv"]),
        shape=jnp.asarray(3.0),
        rate=jnp.asarray(3.0 / t["lam"]),
    )
    Bt, a, U = _b_update(t)
    args.update(Bt=Bt, a=a, U=U)
    args.update(over)
    return macau.vb_link_elbo_term(
        t["link"],
        macau.NormalWishartQ(args["mu"], args["beta"], args["nu"], args["Winv"]),
        macau.LinkQ(args["Bt"], args["a"], args["U"]),
        macau.GammaQ(args["shape"], args["rate"]),
        macau.LinkRows(jnp.asarray(s1), jnp.asarray(s2), jnp.asarray(Gt)),
        M,
        macau.LinkHyper(beta0=2.0, nu0=K + 1.0, W0_scale=0.8, a_B=1.5, b_B=0.5),
    )


def _assert_stationary(fn, params: dict):
    """Every partial derivative of ``fn`` at ``params`` vanishes (relative to the ELBO's size)."""
    val = float(fn(**params))
    grads = jax.grad(lambda p: fn(**p))(params)
    for name, g in grads.items():
        np.testing.assert_allclose(np.asarray(g), 0.0, atol=1e-9 * max(1.0, abs(val)), err_msg=name)


def test_each_update_is_the_optimum_of_the_elbo():
    """The ELBO's gradient in a block's q parameters is zero right after that block's update
    (the others held); the gradient is not zero before it (the check has power)."""
    t = _tiny()
    s1, s2, Gt = _stats(t)
    EL = jnp.asarray(_EL(t))
    # q(lam_B) given q(B) (at its update for E[lam] = t["lam"]) and q(mu, Lambda)
    Bt, a, U = _b_update(t)
    shape, rate = macau.vb_lam_update(t["link"], Bt, a, U, EL, 1.5, 0.5)
    _assert_stationary(
        lambda shape, rate: _elbo_at(t, s1, s2, Gt, shape=shape, rate=rate),
        dict(shape=shape, rate=rate),
    )
    # q(B) given q(lam_B) = Gamma(3, 3 / lam) (mean lam) and q(mu, Lambda)
    _assert_stationary(
        lambda Bt, a, U: _elbo_at(t, s1, s2, Gt, Bt=Bt, a=a, U=U), dict(Bt=Bt, a=a, U=U)
    )
    # q(mu, Lambda) given q(B), q(lam_B)
    mu, beta, nu, Winv = macau.vb_nw_link_update(
        t["link"],
        macau.LinkQ(Bt, a, U),
        t["lam"],
        macau.LinkRows(jnp.asarray(s1), jnp.asarray(s2), jnp.asarray(Gt)),
        M,
        2.0,
        K + 1.0,
        jnp.eye(K) / 0.8,
    )
    nw = dict(
        mu=mu, beta=jnp.asarray(beta, jnp.float64), nu=jnp.asarray(nu, jnp.float64), Winv=Winv
    )
    _assert_stationary(lambda **p: _elbo_at(t, s1, s2, Gt, **p), nw)
    # power: away from the optimum the gradient is not zero
    g = jax.grad(lambda Bt: _elbo_at(t, s1, s2, Gt, Bt=Bt))(Bt + 0.1)
    assert np.abs(np.asarray(g)).max() > 1e-3


def _data(seed=0, m1=12, m2=9, p=0.6):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m1, m2)) < p)
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3)))
    cf = bmc.data.Features.from_dense(rng.integers(0, 2, size=(m2, 4)).astype(float))
    return bmc.RatingData(
        rows, cols, rng.normal(size=rows.size), (m1, m2), row_features=rf, col_features=cf
    )


def test_row_update_uses_the_per_row_prior_means():
    """``q(M_i) = N(P_i^{-1} r_i, P_i^{-1})`` with ``P_i = E[Lambda] + tau sum_j E[n_j n_j^T]``
    and ``r_i = tau sum_j y_ij n_j + E[Lambda] (mu* + Bbar^T x_i)`` (dense, row by row)."""
    data = _data()
    prior = bmc.priors.NormalWishart(row_features=True)
    links = prior.gibbs_links(data, jnp.float64)
    p = build_problem(data, 1.0, dtype=jnp.float64)
    tau = 1.7
    state = vb.init(jax.random.key(0)[None], data.shape, prior, K, jnp.float64, links=links)
    rng = np.random.default_rng(3)
    Bt = rng.normal(size=(1, 3, K))
    mu = rng.normal(size=(1, K))
    W = np.stack([0.05 * (R @ R.T) for R in rng.normal(size=(data.shape[1], K, K))])[None]
    state = state._replace(
        W=jnp.asarray(W), prior={**state.prior, "Bt_M": jnp.asarray(Bt), "mu_M": jnp.asarray(mu)}
    )
    new = vb.update(state, p.rows, p.cols, prior, tau, links=links)
    EL = np.asarray(state.prior["nu_M"])[0] * np.linalg.inv(np.asarray(state.prior["Winv_M"])[0])
    B = np.asarray(links["M/V"]) @ Bt[0]
    X = data.row_features.to_dense()
    n, y = np.asarray(state.n)[0], np.asarray(data.values)
    for i in range(data.shape[0]):
        sel = data.rows == i
        js = data.cols[sel]
        P = EL + tau * sum(np.outer(n[j], n[j]) + W[0, j] for j in js)
        r = tau * (y[sel] @ n[js]) + EL @ (mu[0] + B.T @ X[i])
        np.testing.assert_allclose(
            np.asarray(new.m)[0, i], np.linalg.solve(P, r), rtol=RTOL, atol=1e-12
        )
        np.testing.assert_allclose(np.asarray(new.V)[0, i], np.linalg.inv(P), rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("case", ["rows", "both-implicit", "learned-bias", "ordered-probit"])
def test_elbo_never_decreases(case):
    data = _data(seed=1)
    kw = dict(K=K, method="vb", max_iter=40, tol=0.0, progress_bar=False, seed=0, dtype=jnp.float64)
    if case == "rows":
        prior = bmc.priors.NormalWishart(row_features=True)
    else:
        prior = bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True)
    if case == "learned-bias":
        kw.update(likelihood=LearnedNoise(), biases=True)
    if case == "ordered-probit":
        levels = np.digitize(data.values, [-0.5, 0.5]) + 1.0
        data = bmc.RatingData(
            data.rows,
            data.cols,
            levels,
            data.shape,
            row_features=data.row_features,
            col_features=data.col_features,
        )
        kw.update(likelihood=OrderedProbit(levels=(1.0, 2.0, 3.0)), max_iter=15)
    fit = bmc.fit(data, prior=prior, **kw)
    e = np.asarray(fit.elbo)
    assert np.all(np.isfinite(e))
    drops = e[:-1] - e[1:]
    # float64 rounding of sums of O(|ELBO|) terms
    assert np.all(drops <= 1e-10 * np.abs(e[1:])), drops.max()
    assert e[-1] > e[0] + 1.0  # it moved
    if case != "ordered-probit":
        assert fit.q_prior["B_M"].shape == (
            data.row_features.n_features + (9 if case != "rows" else 0),
            K,
        )


NOISE_SD = 0.3


def _feature_driven(seed: int, m1=200, m2=40, per=4, Fx=4, Kt=2):
    """Rows' factors a linear function of ``Fx`` features (plus N(0, 0.1^2)), ``per``
    ratings per row of which the first is held out."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m1, Fx))
    Btrue = rng.normal(size=(Fx, Kt)) / np.sqrt(Fx)
    U = X @ Btrue + 0.1 * rng.normal(size=(m1, Kt))
    Vt = rng.normal(size=(m2, Kt))
    rows = np.repeat(np.arange(m1), per)
    cols = np.concatenate([rng.choice(m2, per, replace=False) for _ in range(m1)])
    y = np.sum(U[rows] * Vt[cols], axis=1) + NOISE_SD * rng.normal(size=rows.size)
    feats = bmc.data.Features.from_dense(X)
    test = np.zeros(rows.size, bool)
    test[np.arange(m1) * per] = True
    train = bmc.RatingData(rows[~test], cols[~test], y[~test], (m1, m2), row_features=feats)
    return train, bmc.RatingData(rows[test], cols[test], y[test], (m1, m2))


def test_features_improve_vb_predictions_when_factors_depend_on_them():
    """Three training ratings per row cannot pin a row's factor down; its features can.
    Four restarts each (the run with the highest ELBO is kept: CAVI has local optima)."""
    train, test = _feature_driven(2)
    kw = dict(
        K=2,
        method="vb",
        max_iter=300,
        tol=1e-7,
        restarts=4,
        progress_bar=False,
        seed=0,
        test=test,
        likelihood=LearnedNoise(),
    )
    rmse = {}
    for name, prior in (
        ("plain", bmc.priors.NormalWishart()),
        ("linked", bmc.priors.NormalWishart(row_features=True)),
    ):
        pred = np.asarray(bmc.fit(train, prior=prior, **kw).predict(test.rows, test.cols))
        rmse[name] = float(np.sqrt(np.mean((pred - test.values) ** 2)))
    assert rmse["linked"] < 0.8 * rmse["plain"], rmse
    # the rows' factors are known from the features up to N(0, 0.1^2): close to the noise floor
    assert rmse["linked"] < 1.5 * NOISE_SD, rmse


def test_sharded_vb_with_links_is_refused():
    data = _data()
    prior = bmc.priors.NormalWishart(row_features=True)
    with pytest.raises(ValueError, match="feature links runs on one device"):
        bmc.fit(data, K=K, prior=prior, method="vb", progress_bar=False, devices=jax.devices()[:1])


def test_checkpointed_vb_with_links_resumes(tmp_path):
    data = _data(seed=2)
    prior = bmc.priors.NormalWishart(row_features=True, implicit="cols")
    kw = dict(K=K, prior=prior, method="vb", tol=0.0, progress_bar=False, seed=0, dtype=jnp.float64)
    straight = bmc.fit(data, max_iter=12, **kw)
    ck = tmp_path / "vb.npz"
    bmc.fit(data, max_iter=5, checkpoint=str(ck), **kw)
    resumed = bmc.fit(data, max_iter=12, checkpoint=str(ck), **kw)
    np.testing.assert_allclose(resumed.elbo, straight.elbo, rtol=1e-12)
    np.testing.assert_allclose(
        resumed.q_prior["B_N"], straight.q_prior["B_N"], rtol=1e-10, atol=1e-12
    )
