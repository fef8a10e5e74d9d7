"""Feature-driven biases through ``bmc.fit`` (docs/user-guide/priors.md, "Side
information, implicit feedback and cold start"): cold-start rows, ``fold_in`` with the
features' bias mean (exact, per draw, against the dense Gaussian conditional), checkpoint
resume (exact), save/load, any prior, NUTS/SVI sites, and the combinations that are not
implemented (VB, several devices) raising a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
import tqdm.auto

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference import checkpoint as ck
from bmczoo.inference import run as run_loop

M1, M2, F, U = 40, 25, 3, 6
EPS = np.finfo(np.float64).eps
PRIOR = bmc.priors.InverseGamma(3.0, 2.0)  # a column-scale prior: the biases' link is their own
BIASES = bmc.offsets.Biases(row_features=True, col_features=True)


def _problem(seed=0):
    """Rows 0..M1-1 (rows M1-4.. have no rating: cold), U new rows; biases linear in
    features, a small rank-1 signal."""
    rng = np.random.default_rng(seed)
    Xr, Xc = rng.normal(size=(M1 + U, F)), rng.normal(size=(M2, 2))
    b = Xr @ np.array([1.0, -0.6, 0.4])
    c = Xc @ np.array([0.5, -0.3])
    u, v = 0.5 * rng.normal(size=M1 + U), rng.normal(size=M2)
    r, cc = np.nonzero(rng.random((M1, M2)) < 0.35)
    keep = r < M1 - 4
    r, cc = r[keep], cc[keep]

    def values(rows, cols):
        return 3.0 + b[rows] + c[cols] + u[rows] * v[cols] + 0.3 * rng.normal(size=len(rows))

    train = bmc.RatingData(
        r,
        cc,
        values(r, cc),
        (M1, M2),
        row_features=Features.from_dense(Xr[:M1]),
        col_features=Features.from_dense(Xc),
    )
    rn, cn = np.nonzero(rng.random((U, M2)) < 0.2)
    rn, cn = rn[rn > 0], cn[rn > 0]  # new row 0 has no rating
    new = bmc.RatingData(
        rn, cn, values(M1 + rn, cn), (U, M2), row_features=Features.from_dense(Xr[M1:])
    )
    return train, new


def _kw(**kw):
    return dict(
        K=2,
        prior=PRIOR,
        biases=BIASES,
        num_warmup=20,
        num_samples=24,
        thinning=2,
        num_chains=2,
        seed=1,
        progress_bar=False,
        store_factors=True,
        dtype="float64",
        clip=False,
        **kw,
    )


@pytest.fixture(scope="module")
def fitted():
    train, new = _problem()
    return bmc.fit(train, **_kw()), train, new


def _draws(fit, name):
    v = np.asarray(fit._factor_src[name], np.float64)
    return v.reshape((-1,) + v.shape[2:])


def test_draws_hold_the_link(fitted):
    fit, _, _ = fitted
    s = fit.samples
    assert {"row_bias_lam", "col_bias_lam", "row_bias_w", "col_bias_w"} <= set(s)
    assert np.shape(s["row_bias_w"])[-1] == F and np.shape(s["col_bias_w"])[-1] == 2
    assert np.all(np.asarray(s["row_bias_lam"]) > 0)


def test_cold_rows_predict_from_their_features(fitted):
    """A row without ratings: its prediction is the mean over draws of ``M_i . N_j + b_i +
    c_j`` plus the offset (the bias draws come from ``N(x_i^T w, s)``: the Geweke test),
    and ``recommend`` and ``predictive_interval`` serve it."""
    fit, train, _ = fitted
    cold = np.arange(M1 - 4, M1)
    rows, cols = np.repeat(cold, M2), np.tile(np.arange(M2), len(cold))
    M, N = _draws(fit, "M"), _draws(fit, "N")
    b, c = _draws(fit, "row_bias"), _draws(fit, "col_bias")
    ref = np.mean(np.sum(M[:, rows] * N[:, cols], -1) + b[:, rows] + c[:, cols], 0)
    np.testing.assert_allclose(
        fit.predict(rows, cols), ref + fit.info.shift.offset, rtol=1e-10, atol=1e-10
    )
    items, scores = fit.recommend(users=cold, n=3)
    assert np.shape(items) == (4, 3) and np.all(np.isfinite(scores))
    lo, hi = fit.predictive_interval(rows[:5], cols[:5], 0.9)
    assert np.all(lo < hi)


def test_fold_in_uses_the_features_bias_mean(fitted, x64):
    """Per draw, the new rows' ``[M_u, b_u]`` are ``N(P^{-1} rhs, P^{-1})`` with ``P =
    blockdiag(1/gamma, 1/s_b) + tau sum_j f_j f_j^T``, ``rhs = [0, x_u^T w / s_b] + tau
    sum_j (R_uj - c_j) f_j``, ``f_j = [N_j, 1]`` (dense formula)."""
    fit, _, new = fitted
    folded = fit.fold_in(new)
    N, c = _draws(fit, "N"), _draws(fit, "col_bias")
    gamma, var, w = _draws(fit, "gamma"), _draws(fit, "row_bias_var"), _draws(fit, "row_bias_w")
    X = new.row_features.to_dense()
    tau = 1.0 / fit.noise_var()
    R = np.asarray(new.values) - fit.info.shift.offset
    for s in (0, N.shape[0] - 1):
        for u in range(U):
            sel = np.asarray(new.rows) == u
            cols = np.asarray(new.cols)[sel]
            f = np.concatenate([N[s][cols], np.ones((len(cols), 1))], 1)
            P = np.diag(np.append(1.0 / gamma[s], 1.0 / var[s])) + tau * f.T @ f
            rhs = np.append(np.zeros(2), X[u] @ w[s] / var[s]) + tau * f.T @ (R[sel] - c[s][cols])
            x = np.linalg.solve(P, rhs)
            # a rounding bound: the conditioning of P times eps (a gamma draw can be small)
            tol = 100 * np.linalg.cond(P) * EPS * np.abs(x).max()
            np.testing.assert_allclose(folded.means[s, u], x, rtol=0, atol=tol)
    # new row 0 has no rating: its prediction is the features' bias plus the column's
    ref = np.mean(X[0] @ w.T + c[:, 3]) + fit.info.shift.offset
    np.testing.assert_allclose(folded.predict([0], [3]), [ref], rtol=1e-10)


def test_fold_in_needs_the_new_rows_features(fitted):
    fit, _, new = fitted
    bare = bmc.RatingData(new.rows, new.cols, new.values, new.shape)
    with pytest.raises(ValueError, match="the fit's biases links the rows to their features"):
        fit.fold_in(bare)


def test_save_load_keeps_the_links(fitted, tmp_path):
    fit, train, new = fitted
    path = tmp_path / "fit.npz"
    fit.save(path)  # the default keeps every factor draw: the same predictions
    loaded = bmc.load(path)
    assert loaded.info.biases == fit.info.biases
    rows, cols = np.arange(M1), np.zeros(M1, int)
    np.testing.assert_array_equal(loaded.predict(rows, cols), fit.predict(rows, cols))
    np.testing.assert_array_equal(loaded.fold_in(new).means, fit.fold_in(new).means)


def test_save_load_with_a_features_table(tmp_path):
    train, _ = _problem()
    table = bmc.offsets.Biases(row_features=train.row_features, implicit="cols")
    fit = bmc.fit(
        train,
        K=2,
        prior=PRIOR,
        biases=table,
        num_warmup=4,
        num_samples=4,
        thinning=1,
        num_chains=1,
        progress_bar=False,
    )
    fit.save(tmp_path / "t.npz")
    loaded = bmc.load(tmp_path / "t.npz")
    assert str(loaded.info.biases) == str(fit.info.biases)
    assert loaded.info.biases.links() == fit.info.biases.links()


class _Bar(tqdm.auto.tqdm):
    calls = 0

    def update(self, n=1):
        type(self).calls += 1
        if type(self).calls == 3:
            raise KeyboardInterrupt
        return super().update(n)


def test_checkpoint_resume_is_exact(fitted, tmp_path, monkeypatch):
    fit, train, _ = fitted
    path = tmp_path / "run.npz"
    monkeypatch.setattr(run_loop, "tqdm", _Bar)
    with pytest.raises(KeyboardInterrupt, match="interrupted after"):
        bmc.fit(train, checkpoint=path, checkpoint_every=5, **{**_kw(), "progress_bar": True})
    monkeypatch.undo()
    _, arrays = ck.load_npz(path)
    assert 0 < int(arrays["state/iteration"]) < 44
    assert "state/bias/row_bias_wt" in arrays and "state/bias/col_bias_lam" in arrays
    resumed = bmc.fit(train, checkpoint=path, checkpoint_every=5, **_kw())
    for k in fit.samples:
        np.testing.assert_array_equal(
            np.asarray(resumed.samples[k]), np.asarray(fit.samples[k]), err_msg=k
        )


def test_several_devices_are_refused():
    train, _ = _problem()
    from bmczoo.inference import gibbs

    with pytest.raises(ValueError, match="Biases with features run on one device"):
        gibbs.build_problem(train, 1.0, biases=BIASES, mesh=[object()])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["nuts", "svi"])
def test_numpyro_methods_sample_the_link(method):
    train, _ = _problem()
    kw = dict(num_warmup=30, num_samples=30) if method == "nuts" else dict(num_steps=200)
    fit = bmc.fit(
        train, K=2, method=method, prior=PRIOR, biases=BIASES, seed=0, progress_bar=False, **kw
    )
    cold = np.arange(M1 - 4, M1)
    assert np.all(np.isfinite(fit.predict(cold, np.zeros(4, int))))
