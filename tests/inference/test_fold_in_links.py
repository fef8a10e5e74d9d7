"""Fold-in and cold start under the Normal-Wishart prior's feature link: new rows get the
prior mean ``mu + B^T x_u`` of their own features (and implicit feedback), exactly."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features, implicit_features

M1, M2, K, F = 120, 80, 3, 4


def _problem(seed=0, U=30, new_density=0.05):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(F, K))
    X = rng.normal(size=(M1 + U, F))
    Mf = X @ B + 0.3 * rng.normal(size=(M1 + U, K))
    Nf = rng.normal(size=(M2, K))
    theta = Mf @ Nf.T
    r, c = np.nonzero(rng.random((M1, M2)) < 0.3)
    train = bmc.RatingData(
        r,
        c,
        theta[r, c] + 0.3 * rng.normal(size=len(r)),
        shape=(M1, M2),
        row_features=Features.from_dense(X[:M1]),
    )
    rn, cn = np.nonzero(rng.random((U, M2)) < new_density)
    new = bmc.RatingData(
        rn,
        cn,
        theta[M1 + rn, cn] + 0.3 * rng.normal(size=len(rn)),
        shape=(U, M2),
        row_features=Features.from_dense(X[M1:]),
    )
    return train, new, theta[M1:]


def _fit(train, prior):
    return bmc.fit(
        train,
        K=K,
        prior=prior,
        num_warmup=50,
        num_samples=50,
        thinning=1,
        num_chains=1,
        seed=0,
        progress_bar=False,
    )


@pytest.fixture(scope="module")
def linked():
    train, new, theta_new = _problem()
    return _fit(train, bmc.priors.NormalWishart(row_features=True)), train, new, theta_new


def _draw(fit, name):
    return np.asarray(fit._factor_src[name], np.float64).reshape(
        (-1,) + np.shape(fit._factor_src[name])[2:]
    )


def _exact(fit, new, X):
    """The Gaussian conditional of each new row per draw, from dense formulas."""
    B, mu, Lam = _draw(fit, "B_M"), _draw(fit, "mu_M"), _draw(fit, "Lambda_M")
    N = _draw(fit, "N")
    tau = 1.0 / fit.noise_var()
    means = np.zeros((B.shape[0], new.shape[0], K))
    for s in range(B.shape[0]):
        for u in range(new.shape[0]):
            sel = np.asarray(new.rows) == u
            Nu = N[s][np.asarray(new.cols)[sel]]
            P = Lam[s] + tau * Nu.T @ Nu
            rhs = Lam[s] @ (mu[s] + X[u] @ B[s]) + tau * Nu.T @ (
                np.asarray(new.values)[sel] - fit.info.shift.offset
            )
            means[s, u] = np.linalg.solve(P, rhs)
    return means


def test_fold_in_uses_the_new_rows_features_exactly(linked):
    fit, _, new, _ = linked
    folded = fit.fold_in(new)
    exact = _exact(fit, new, new.row_features.to_dense())
    np.testing.assert_allclose(folded.means, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max())


def test_a_new_row_without_ratings_gets_the_links_prior_mean(linked):
    fit, _, new, _ = linked
    # only the first new row has ratings (RatingData holds at least one)
    keep = np.asarray(new.rows) == 0
    sparse = bmc.RatingData(
        np.asarray(new.rows)[keep],
        np.asarray(new.cols)[keep],
        np.asarray(new.values)[keep],
        shape=new.shape,
        row_features=new.row_features,
    )
    folded = fit.fold_in(sparse)
    B, mu, Lam = _draw(fit, "B_M"), _draw(fit, "mu_M"), _draw(fit, "Lambda_M")
    X = new.row_features.to_dense()[1:]
    prior_mean = mu[:, None, :] + np.einsum("uf,sfk->suk", X, B)
    np.testing.assert_allclose(folded.means[:, 1:], prior_mean, rtol=1e-9, atol=1e-12)
    cov = np.broadcast_to(np.linalg.inv(Lam)[:, None], folded.covs[:, 1:].shape)
    np.testing.assert_allclose(folded.covs[:, 1:], cov, rtol=1e-7, atol=1e-12)


def test_features_improve_the_fold_in_of_sparse_new_rows(linked):
    fit, train, new, theta_new = linked
    U = new.shape[0]
    rr, cc = np.divmod(np.arange(U * M2), M2)
    with_features = np.sqrt(np.mean((fit.fold_in(new).predict(rr, cc) - theta_new.ravel()) ** 2))
    plain = _fit(train.with_features(row_features=None), bmc.priors.NormalWishart())
    bare = bmc.RatingData(new.rows, new.cols, new.values, shape=new.shape)
    without = np.sqrt(np.mean((plain.fold_in(bare).predict(rr, cc) - theta_new.ravel()) ** 2))
    # the new rows have about 4 ratings each: their features carry most of M_u
    assert with_features < 0.6 * without, (with_features, without)


def test_fold_in_with_implicit_rows_builds_the_new_rows_implicit_features():
    train, new, _ = _problem(seed=1)
    fit = _fit(train, bmc.priors.NormalWishart(row_features=True, implicit="rows"))
    folded = fit.fold_in(new)
    X = np.hstack([new.row_features.to_dense(), implicit_features(new, "rows").to_dense()])
    exact = _exact(fit, new, X)
    np.testing.assert_allclose(folded.means, exact, rtol=1e-9, atol=1e-9 * np.abs(exact).max())


def test_fold_in_errors_name_the_missing_features(linked):
    fit, _, new, _ = linked
    bare = bmc.RatingData(new.rows, new.cols, new.values, shape=new.shape)
    with pytest.raises(ValueError, match="new rows need theirs"):
        fit.fold_in(bare)
    wrong = bmc.RatingData(
        new.rows,
        new.cols,
        new.values,
        shape=new.shape,
        row_features=Features.from_dense(np.ones((new.shape[0], F + 1))),
    )
    with pytest.raises(ValueError, match=f"{F + 1} features, the fit's row link has {F}"):
        fit.fold_in(wrong)


def test_vb_fold_in_uses_the_features():
    """VB: a new row without ratings gets ``mu* + E[B]^T x_u``; features help sparse rows."""
    train, new, theta_new = _problem(seed=2)
    fit = bmc.fit(
        train,
        K=K,
        prior=bmc.priors.NormalWishart(row_features=True),
        method="vb",
        seed=0,
        progress_bar=False,
    )
    keep = np.asarray(new.rows) == 0
    sparse = bmc.RatingData(
        np.asarray(new.rows)[keep],
        np.asarray(new.cols)[keep],
        np.asarray(new.values)[keep],
        shape=new.shape,
        row_features=new.row_features,
    )
    folded = fit.fold_in(sparse)
    EB = np.asarray(fit.q_prior["B_M"], np.float64).reshape(F, K)
    mu = np.asarray(fit.q_prior["mu_M"], np.float64).reshape(K)
    np.testing.assert_allclose(
        folded.means[0, 1:], mu + new.row_features.to_dense()[1:] @ EB, rtol=1e-6, atol=1e-9
    )
    U = new.shape[0]
    rr, cc = np.divmod(np.arange(U * M2), M2)
    with_features = np.sqrt(np.mean((fit.fold_in(new).predict(rr, cc) - theta_new.ravel()) ** 2))
    plain = bmc.fit(
        train.with_features(row_features=None),
        K=K,
        prior=bmc.priors.NormalWishart(),
        method="vb",
        seed=0,
        progress_bar=False,
    )
    bare = bmc.RatingData(new.rows, new.cols, new.values, shape=new.shape)
    without = np.sqrt(np.mean((plain.fold_in(bare).predict(rr, cc) - theta_new.ravel()) ** 2))
    assert with_features < 0.6 * without, (with_features, without)


def test_float64_fit_folds_in_in_float64_without_global_x64():
    """A float64 fit's fold-in runs in float64 whatever the global setting: VB's linked
    fold-in mixed float32 and float64 arrays (a TypeError) and Gibbs' rounded to float32."""
    import jax

    from bmczoo.data import Features

    assert not jax.config.jax_enable_x64
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    rows, cols = np.nonzero(rng.random((40, 30)) < 0.3)
    data = bmc.RatingData(
        rows, cols, rng.normal(size=rows.size), shape=(40, 30), row_features=Features.from_dense(X)
    )
    new = bmc.RatingData(
        np.array([0, 1]),
        np.array([3, 4]),
        np.array([0.5, -0.2]),
        shape=(2, 30),
        row_features=Features.from_dense(X[:2]),
    )
    r, c = np.array([0, 1]), np.array([5, 6])
    for method, kw in (
        ("gibbs", dict(num_warmup=10, num_samples=10, num_chains=1, thinning=1)),
        ("vb", dict(max_iter=20)),
    ):
        fit = bmc.fit(
            data,
            K=2,
            method=method,
            prior=bmc.priors.NormalWishart(row_features=True),
            dtype="float64",
            progress_bar=False,
            **kw,
        )
        pred = fit.fold_in(new).predict(r, c)
        with jax.enable_x64(True):
            ref = fit.fold_in(new).predict(r, c)
        np.testing.assert_allclose(pred, ref, rtol=1e-12, err_msg=method)
