"""The Normal-Wishart prior's feature link (Macau, docs/algorithms.md, "Feature links (side
information)"): exact float64
checks of its conditionals against the dense formulas on a tiny problem, its hooks into
the Gibbs engine, its NumPyro statements and its argument checks.

The draw of ``B`` is linear in its standard normals ``Z``, so its mean (the draw at
``Z = 0``) and covariance (``J J^T``, ``J`` the Jacobian in ``Z``) are compared exactly
with ``MN(A^{-1} X^T E, A^{-1}, Lambda^{-1})``, ``A = X^T X + lam_B I``.  The Geweke
tests of the blocks are in ``tests/inference/test_geweke_macau.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density

import bmczoo as bmc
from bmczoo.inference import gibbs
from bmczoo.models import matrix_completion
from bmczoo.priors import macau

pytestmark = pytest.mark.usefixtures("x64")

M, F, K = 7, 4, 2
RTOL = 1e-10  # float64 rounding of O(F^3) operations on O(1) numbers


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(M, F))
    X[:, 3] = X[:, 0] + X[:, 1]  # X^T X singular: A = X^T X + lam_B I must still be right
    X[2] = 0.0  # a row without features
    feats = bmc.data.Features.from_dense(X)
    link = macau.link_arrays(feats, jnp.float64)
    Mf = rng.normal(size=(M, K))
    mu = rng.normal(size=K)
    R = rng.normal(size=(K, K))
    Lam = R @ R.T + K * np.eye(K)
    B = rng.normal(size=(F, K))
    return feats.to_dense(), link, Mf, mu, Lam, B


def _Gt(link, X, Mf):
    return np.asarray(link["V"]).T @ (X.T @ Mf)


def test_link_arrays_diagonalise_the_gram_matrix():
    X, link, *_ = _problem()
    V, d = np.asarray(link["V"]), np.asarray(link["d"])
    np.testing.assert_allclose(V @ np.diag(d) @ V.T, X.T @ X, atol=RTOL * np.abs(X.T @ X).max())
    np.testing.assert_allclose(V.T @ V, np.eye(F), atol=RTOL)
    np.testing.assert_allclose(np.asarray(link["u"]), V.T @ X.sum(0), rtol=RTOL, atol=RTOL)


def test_b_conditional_mean_and_covariance_are_the_dense_formula():
    X, link, Mf, mu, Lam, _ = _problem()
    lam = 0.7
    Gt = jnp.asarray(_Gt(link, X, Mf))
    V = link["V"]

    def draw(z):  # vec(B) row-major as a function of vec(Z)
        Bt = macau.b_draw(link, jnp.asarray(mu), jnp.asarray(Lam), lam, Gt, z.reshape(F, K))
        return (V @ Bt).reshape(-1)

    A = X.T @ X + lam * np.eye(F)
    mean = np.linalg.solve(A, X.T @ (Mf - mu[None, :]))
    np.testing.assert_allclose(
        np.asarray(draw(jnp.zeros(F * K))).reshape(F, K), mean, rtol=1e-9, atol=1e-12
    )
    J = np.asarray(jax.jacfwd(draw)(jnp.zeros(F * K)))
    cov = np.kron(np.linalg.inv(A), np.linalg.inv(Lam))
    np.testing.assert_allclose(J @ J.T, cov, rtol=1e-9, atol=1e-12)


def test_lam_conditional_is_the_dense_formula():
    X, link, Mf, mu, Lam, B = _problem()
    Bt = np.asarray(link["V"]).T @ B
    shape, rate = macau.lam_conditional(jnp.asarray(Bt), jnp.asarray(Lam), 1.5, 0.5)
    assert float(shape) == 1.5 + F * K / 2
    np.testing.assert_allclose(float(rate), 0.5 + 0.5 * np.trace(B @ Lam @ B.T), rtol=RTOL)


def test_normal_wishart_given_the_link_is_the_dense_formula():
    """Residuals as data, F added to the degrees of freedom and lam_B B^T B to the scatter."""
    X, link, Mf, mu, Lam, B = _problem()
    lam, beta0, nu0, W0_scale = 0.7, 2.0, K + 1.0, 0.5
    Bt = np.asarray(link["V"]).T @ B
    out = macau.nw_link_conditional(
        link,
        jnp.asarray(Bt),
        lam,
        jnp.asarray(Mf.sum(0)),
        jnp.asarray(Mf.T @ Mf),
        jnp.asarray(_Gt(link, X, Mf)),
        M,
        beta0,
        nu0,
        jnp.eye(K) / W0_scale,
    )
    mu_star, beta_star, nu_star, Winv = (np.asarray(v) for v in out)
    E = Mf - X @ B
    ebar = E.mean(0)
    S = (E - ebar).T @ (E - ebar)
    assert float(beta_star) == beta0 + M and float(nu_star) == nu0 + M + F
    np.testing.assert_allclose(mu_star, E.sum(0) / (beta0 + M), rtol=1e-9, atol=1e-12)
    expected = (
        np.eye(K) / W0_scale + S + beta0 * M / (beta0 + M) * np.outer(ebar, ebar) + lam * B.T @ B
    )
    np.testing.assert_allclose(Winv, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("wide", [False, True], ids=["tall", "wide"])
def test_engine_hooks_are_the_dense_formulas(wide):
    """Per-row shifts ``Lambda (mu + B^T x_i)`` and the link statistics ``V^T X^T M``, with
    the state's ``Bt = V^T B``; ``wide``: fewer rows than features (the ``X V`` products)
    and a null space of dimension ``F - M``."""
    X, _, Mf, mu, Lam, B = _problem()
    rng = np.random.default_rng(1)
    if wide:
        X = np.hstack([X, rng.normal(size=(M, 2 * M))])
        B = rng.normal(size=(X.shape[1], K))
    m2 = 5
    rows, cols = np.divmod(np.arange(M * m2), m2)
    data = bmc.RatingData(
        rows,
        cols,
        rng.normal(size=rows.size),
        (M, m2),
        row_features=bmc.data.Features.from_dense(X),
    )
    prior = bmc.priors.NormalWishart(row_features=True)
    links = prior.gibbs_links(data, jnp.float64)
    assert not any(k.startswith("N/") for k in links)
    assert ("M/XV" in links) == wide
    assert links["M/Vr"].shape[1] == (M if wide else F - 1)  # the rank of X (tall: X^T X singular)
    V = np.asarray(links["M/V"])
    state = {
        "mu_M": mu[None],
        "Lambda_M": Lam[None],
        "Bt_M": (V.T @ B)[None],
        "lam_B_M": np.ones(1),
        "mu_N": np.zeros((1, K)),
        "Lambda_N": np.eye(K)[None],
    }
    state = jax.tree.map(jnp.asarray, state)
    (PM, sM), (PN, sN) = prior.link_row_priors(state, links, M, m2)
    np.testing.assert_allclose(np.asarray(sM[0]), (mu[None] + X @ B) @ Lam, rtol=1e-9, atol=1e-12)
    assert sN.shape == (1, K)
    stats = prior.link_factor_stats(jnp.asarray(Mf[None]), links, "M")
    np.testing.assert_allclose(np.asarray(stats[2][0]), V.T @ X.T @ Mf, rtol=1e-9, atol=1e-9)
    assert len(prior.link_factor_stats(jnp.asarray(np.ones((1, m2, K))), links, "N")) == 2
    stored = macau.stored_links({"Bt_M": state["Bt_M"], "lam_B_M": state["lam_B_M"]}, links)
    assert list(stored) == ["B_M"]
    np.testing.assert_allclose(np.asarray(stored["B_M"][0]), B, rtol=1e-9, atol=1e-12)


def _data(with_features=True):
    rng = np.random.default_rng(3)
    m1, m2 = 12, 9
    rows, cols = np.nonzero(rng.random((m1, m2)) < 0.5)
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3))) if with_features else None
    cf = (
        bmc.data.Features.from_dense(rng.integers(0, 2, size=(m2, 4)).astype(float))
        if with_features
        else None
    )
    return bmc.RatingData(
        rows, cols, rng.normal(size=rows.size), (m1, m2), row_features=rf, col_features=cf
    )


def test_a_linked_sweep_runs_and_keeps_b_only_with_the_factors():
    data = _data()
    prior = bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True)
    problem = gibbs.build_problem(data, 1.0, dtype=jnp.float64, prior=prior)
    assert problem.links["M/d"].shape == (3 + 9,) and problem.links["N/d"].shape == (4 + 12,)
    state = gibbs.init(jax.random.split(jax.random.key(0), 2), problem, prior, 2)
    for _ in range(3):
        state = gibbs.step(state, problem, prior)
    gibbs.check_failure(state)
    assert state.prior_state["Bt_M"].shape == (2, 12, 2) and state.prior_state["lam_B_N"].shape == (
        2,
    )
    plain = gibbs.draws(state, problem)
    assert "Bt_M" not in plain and "B_M" not in plain and "lam_B_M" in plain
    stored = gibbs.draws(state, problem, store_factors=True)
    assert stored["B_N"].shape == (2, 16, 2) and "Bt_N" not in stored
    np.testing.assert_allclose(
        np.asarray(stored["B_N"]),
        np.einsum("fg,cgk->cfk", problem.links["N/V"], state.prior_state["Bt_N"]),
        rtol=1e-12,
    )


def test_feature_specifications_are_checked():
    with pytest.raises(ValueError, match="row_features must be None, True"):
        bmc.priors.NormalWishart(row_features="yes")
    with pytest.raises(ValueError, match="implicit must be"):
        bmc.priors.NormalWishart(implicit="both")
    with pytest.raises(ValueError, match="a_B must be finite and > 0"):
        bmc.priors.NormalWishart(row_features=True, a_B=0.0)
    bare = _data(with_features=False)
    with pytest.raises(ValueError, match="the data has no row_features"):
        gibbs.build_problem(bare, 1.0, prior=bmc.priors.NormalWishart(row_features=True))
    wrong = bmc.data.Features.from_dense(np.ones((5, 2)))
    with pytest.raises(ValueError, match="row_features has 5 rows, the data has 12 rows"):
        gibbs.build_problem(bare, 1.0, prior=bmc.priors.NormalWishart(row_features=wrong))
    prior = bmc.priors.NormalWishart(col_features=True)
    with pytest.raises(ValueError, match="build the problem with"):
        gibbs.init(jax.random.key(0)[None], gibbs.build_problem(_data(), 1.0), prior, 2)


def test_a_prior_holding_a_table_stays_a_static_argument():
    table = _data().row_features
    a, b = (
        bmc.priors.NormalWishart(row_features=table),
        bmc.priors.NormalWishart(row_features=table),
    )
    assert a == b and hash(a) == hash(b)
    assert a != bmc.priors.NormalWishart(row_features=True)
    assert a.row_features.features is table
    assert a.linked_sides == ("M",) and bmc.priors.NormalWishart(implicit="cols").linked_sides == (
        "N",
    )
    assert bmc.priors.NormalWishart().hyperparameters() == {"beta0": 2.0, "W0_scale": 1.0}


def test_numpyro_statements_of_the_link():
    """Sites ``lam_B_F``, ``B_F`` and rows with mean ``mu_F + B_F^T x_i``: the model's
    density at a point is the sum of the dense log densities."""
    from scipy import stats

    data = _data()
    prior = bmc.priors.NormalWishart(row_features=True, implicit="cols", nu0=K + 1.0)
    tr = handlers.trace(handlers.seed(matrix_completion, 0)).get_trace(data, K, prior)
    assert tr["B_M"]["value"].shape == (3, K) and tr["B_N"]["value"].shape == (12, K)
    assert tr["lam_B_M"]["value"].shape == ()
    params = {
        k: v["value"] for k, v in tr.items() if v["type"] == "sample" and not v["is_observed"]
    }
    lp, _ = log_density(matrix_completion, (data, K, prior), {}, params)
    expected = 0.0
    Xs = {
        "M": data.row_features.to_dense(),
        "N": bmc.data.implicit_features(data, "cols").to_dense(),
    }
    for side in ("M", "N"):
        p = {k: np.asarray(params[f"{k}_{side}"]) for k in ("Lambda", "mu", "lam_B", "B")}
        Lam, cov = p["Lambda"], np.linalg.inv(p["Lambda"])
        expected += stats.wishart(df=K + 1.0, scale=np.eye(K)).logpdf(Lam)
        expected += stats.multivariate_normal(np.zeros(K), cov / 2.0).logpdf(p["mu"])
        expected += stats.gamma(1.0, scale=1.0).logpdf(p["lam_B"])
        expected += stats.multivariate_normal(np.zeros(K), cov / p["lam_B"]).logpdf(p["B"]).sum()
        loc = p["mu"] + Xs[side] @ p["B"]
        expected += sum(
            stats.multivariate_normal(mean, cov).logpdf(x)
            for mean, x in zip(loc, np.asarray(params[side]))
        )
    theta = np.sum(np.asarray(params["M"])[data.rows] * np.asarray(params["N"])[data.cols], axis=-1)
    expected += stats.norm(theta, 1.0).logpdf(data.values).sum()
    np.testing.assert_allclose(float(lp), expected, rtol=1e-9)


def test_paths_without_the_link_refuse_a_linked_prior():
    """The plain row prior would drop the features: a clear error instead."""
    prior = bmc.priors.NormalWishart(row_features=True)
    with pytest.raises(NotImplementedError, match="feature links"):
        prior.row_priors(prior.gibbs_state(2, 12, 9))
    bmc.priors.NormalWishart().row_priors(bmc.priors.NormalWishart().gibbs_state(2, 12, 9))


@pytest.mark.slow
def test_nuts_samples_the_linked_model():
    """NUTS runs on the link's NumPyro statements (sites B_M, lam_B_M)."""
    fit = bmc.fit(
        _data(),
        K=2,
        prior=bmc.priors.NormalWishart(row_features=True),
        method="nuts",
        num_warmup=20,
        num_samples=10,
        num_chains=1,
        progress_bar=False,
        seed=0,
    )
    assert np.all(np.isfinite(fit.predict(np.array([0, 1]), np.array([0, 1]))))
