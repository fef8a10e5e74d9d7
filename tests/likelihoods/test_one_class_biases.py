"""The one-class likelihood with row and column biases ``theta_ij = M_i.N_j + b_i + c_j``
(no global mean: a one-class fit neither centres nor clips).

* Exact conditionals (float64): on a partial pattern, the biases and then the rows of ``M``
  (of ``N``) that the engine draws (:func:`~bmczoo.inference.gibbs.rows.half_sweep` with
  zero normals: the means; with unit normals: the standard deviations of the biases and
  the columns of ``L^-T`` of the rows) against the dense Gaussian regressions over every
  pair of the matrix (``c0`` at the unobserved ones), on every hot path (BCSR, segment sums
  and the compiled Gram kernel, at a K below and above its threshold).
* Geweke (2004): the joint of ``(gamma, s_b^2, s_c^2, M, N, b, c, Y)`` with ``Y_ij ~
  N(theta_ij, 1/(lam c_ij))`` at every pair of a 6 x 5 matrix, the targets random and each
  pair's confidence from its position (the test likelihood of ``test_one_class.py``), so
  the sparse weights ``c_k - c0`` and the shared ``c0`` terms both enter the biases' sums.
  Power: a sweep whose biases' precisions lack the shared ``c0 m`` (the count of every
  pair), and one whose factor rows' right-hand sides lack ``c0 sum_j c_j F_j``, are
  detected.
* Short fits in float32 and float64, save/load, and the NumPyro model's density.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _native
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs import rows as gibbs_rows
from bmczoo.inference.gibbs.latent import ratings_view
from bmczoo.inference.gibbs.rows import Conditional, Side, SweepFlags, half_sweep
from bmczoo.inference.settings import SweepOptions
from bmczoo.linalg import use_hot_path

from tests.inference._geweke import run_chains, with_ratings, z_scores
from tests.likelihoods.test_one_class import (
    CONF,
    DISCRETE,
    ENTRIES,
    G_COLS,
    G_ROWS,
    GEWEKE_LIK,
    IG,
    K_G,
    LIK,
    M1,
    M2,
    _implicit_data,
)

BIASES = bmc.offsets.Biases(a=6.0, b=5.0)


# --------------------------------------------------------------------------- exact conditional
def _dense_biases(P, C, F, own, bias_other, inv_var, lam):
    """Mean and variance (m,) of every bias given the rows ``own`` (m, K), the other
    factor ``F`` and the other side's biases, from the full preferences ``P`` and
    confidences ``C`` (numpy float64)."""
    prec = inv_var + lam * C.sum(axis=1)
    resid = P - own @ F.T - bias_other[None, :]
    return lam * np.sum(C * resid, axis=1) / prec, 1.0 / prec


def _dense_rows(P, C, F, bias_own, bias_other, gamma, lam):
    """Mean (m, K) and covariance (m, K, K) of every row given the biases (the targets
    ``P_ij - b_i - c_j``) and the other factor ``F``."""
    prec = np.diag(1.0 / gamma) + lam * np.einsum("ij,jk,jl->ikl", C, F, F)
    target = P - bias_own[:, None] - bias_other[None, :]
    rhs = lam * np.einsum("ij,jk->ik", C * target, F)
    return np.linalg.solve(prec, rhs[..., None])[..., 0], np.linalg.inv(prec)


def _engine_side(problem, state, prior, which, inv_var):
    """The half sweep's biases (mean, variance) and then rows (mean, covariance, given the
    biases' means): zero normals give the means; unit normals ``zb`` give ``mean + 1 /
    sqrt(p)`` and ``e_h`` give ``mean + L^-T e_h``."""
    views = ratings_view(state.lik_state, problem)
    pM, pN = prior.row_priors(state.prior_state)
    if which == 0:
        side = Side(problem.rows, state.M, state.N, state.row_bias, state.col_bias, *views[0])
    else:
        side = Side(problem.cols, state.N, state.M, state.col_bias, state.row_bias, *views[1])
    C, m, K = side.own.shape
    cond = Conditional((pM, pN)[which], state.tau, inv_var)

    def draw(z, zb):
        x, b, _, _ = half_sweep(side, z, zb, cond, SweepFlags(0.0, True, False))
        return np.asarray(x), np.asarray(b)

    zeros, zb0 = jnp.zeros((C, m, K)), jnp.zeros((C, m))
    mean, b_mean = draw(zeros, zb0)
    b_sd = draw(zeros, jnp.ones((C, m)))[1] - b_mean
    X = np.stack([draw(jnp.broadcast_to(jnp.eye(K)[h], (C, m, K)), zb0)[0] for h in range(K)], -1)
    X = X - mean[..., None]  # L^-T, row by row
    return (b_mean, b_sd**2), (mean, X @ np.swapaxes(X, -1, -2))


HOT_PATHS = [("bcsr", 3), ("segment", 3)]
if _native.available():
    HOT_PATHS += [("gram", 3), ("gram", 14)]


@pytest.mark.parametrize("path, K", HOT_PATHS, ids=[f"{p}-K{k}" for p, k in HOT_PATHS])
def test_bias_and_row_conditionals_are_the_dense_gaussian(x64, path, K):
    data = _implicit_data()
    prior = bmc.priors.InverseGamma(3.0, 2.0)
    with use_hot_path(path):
        problem = gibbs.build_problem(
            data, LIK.lam, dtype=jnp.float64, likelihood=LIK, biases=bmc.offsets.Biases()
        )
    rng = np.random.default_rng(1)
    gamma = rng.uniform(0.5, 2.0, size=(2, K))  # two chains, each its own gamma
    state = gibbs.init(jax.random.split(jax.random.key(0), 2), problem, prior, K, gamma=gamma)
    b, c = rng.normal(size=(2, data.shape[0])), rng.normal(size=(2, data.shape[1]))
    state = state._replace(row_bias=jnp.asarray(b), col_bias=jnp.asarray(c))
    inv_var = np.array([0.7, 2.5])  # each chain its own 1/s^2
    P, Cf = LIK.pair_arrays(data)
    sides = [(state.M, state.N, b, c, P, Cf), (state.N, state.M, c, b, P.T, Cf.T)]
    for which, (own, F, b_own, b_other, Pw, Cw) in enumerate(sides):
        (bm, bv), (mean, cov) = _engine_side(problem, state, prior, which, jnp.asarray(inv_var))
        for ch in range(2):
            own_c, F_c = np.asarray(own[ch]), np.asarray(F[ch])
            want_bm, want_bv = _dense_biases(Pw, Cw, F_c, own_c, b_other[ch], inv_var[ch], LIK.lam)
            np.testing.assert_allclose(bm[ch], want_bm, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(bv[ch], want_bv, rtol=1e-9, atol=1e-12)
            want = _dense_rows(Pw, Cw, F_c, bm[ch], b_other[ch], gamma[ch], LIK.lam)
            np.testing.assert_allclose(mean[ch], want[0], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(cov[ch], want[1], rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- Geweke
def _joint(prior, size, rng):
    """``size`` exact draws of ``(gamma, var, M, N, b, c, Y)`` (numpy float64)."""
    shape = (size, K_G)
    if isinstance(prior, bmc.priors.InverseGamma):
        gamma = prior.b / rng.gamma(prior.a, 1.0, shape)
    else:
        gamma = np.where(rng.random(shape) < prior.p, prior.C, prior.eps)
    sd = np.sqrt(gamma)[:, None, :]
    M = rng.standard_normal((size, M1, K_G)) * sd
    N = rng.standard_normal((size, M2, K_G)) * sd
    var = BIASES.b / rng.gamma(BIASES.a, size=(size, 2))
    b = rng.standard_normal((size, M1)) * np.sqrt(var[:, :1])
    c = rng.standard_normal((size, M2)) * np.sqrt(var[:, 1:])
    theta = np.sum(M[:, G_ROWS] * N[:, G_COLS], axis=-1) + b[:, G_ROWS] + c[:, G_COLS]
    Y = theta + rng.standard_normal(theta.shape) / np.sqrt(GEWEKE_LIK.lam * CONF)
    return gamma, var, M, N, b, c, Y


def _theta(M, N, b, c):
    return jnp.sum(M[G_ROWS] * N[G_COLS], axis=-1) + b[G_ROWS] + c[G_COLS]


def _functions(gamma, var, M, N, b, c, Y):
    theta = _theta(M, N, b, c)
    f = [jnp.log(gamma[0]) + jnp.log(gamma[1]), gamma[0] + gamma[1]]
    f += list(theta[ENTRIES]) + list(theta[ENTRIES] ** 2)
    f += [jnp.sum(M**2), jnp.sum(N**2), jnp.sum(Y**2), jnp.sum(Y * theta)]
    f += [jnp.sum(CONF * (Y - theta) ** 2)]
    f += [b[0], b[0] ** 2, c[0], c[0] ** 2, jnp.sum(b**2), jnp.sum(c**2), jnp.sum(b) * jnp.sum(c)]
    f += [jnp.log(var[0]), jnp.log(var[1])]
    return jnp.stack(f)


def _successive(prior, options, num_chains, num_steps, seed):
    template = bmc.RatingData(G_ROWS, G_COLS, np.zeros(G_ROWS.size), (M1, M2))
    problem = gibbs.build_problem(
        template,
        GEWEKE_LIK.lam,
        dtype=jnp.float64,
        likelihood=GEWEKE_LIK,
        biases=BIASES,
        options=options,
    )
    row_order = jnp.asarray(template.row_view.order)
    col_order = jnp.asarray(template.col_view.order)
    gamma, var, M, N, b, c, Y = (
        jnp.asarray(a) for a in _joint(prior, num_chains, np.random.default_rng(seed + 1))
    )

    def start(key, g, var, M, N, b, c):
        st = gibbs.init(key[None], problem, prior, K_G, prior_state={"gamma": g[None]})
        return st._replace(
            M=M[None], N=N[None], row_bias=b[None], col_bias=c[None], bias_var=var[None]
        )

    keys0 = jax.random.split(jax.random.key(seed + 10), num_chains)
    state = jax.vmap(start)(keys0, gamma, var, M, N, b, c)
    sd = jnp.asarray(1.0 / np.sqrt(GEWEKE_LIK.lam * CONF))

    def one_step(carry, _):
        state, Y, key = carry
        key, k_y = jax.random.split(key)
        state = gibbs.sweep(state, with_ratings(problem, Y, row_order, col_order), prior)
        M, N, b, c = state.M[0], state.N[0], state.row_bias[0], state.col_bias[0]
        g, var = state.prior_state["gamma"][0], state.bias_var[0]
        f = _functions(g, var, M, N, b, c, Y)
        theta = _theta(M, N, b, c)
        return (state, theta + sd * jax.random.normal(k_y, theta.shape, theta.dtype), key), f

    keys = jax.random.split(jax.random.key(seed), num_chains)
    return run_chains(one_step, (state, Y, keys), num_steps)


def _marginal(prior, seed):
    """The test functions of 40,000 exact joint draws."""
    draws = _joint(prior, 40_000, np.random.default_rng(seed + 2))
    return np.asarray(jax.vmap(_functions)(*(jnp.asarray(d) for d in draws)))


def _geweke_z(prior, options, seed=0):
    succ = _successive(prior, options, num_chains=100, num_steps=200, seed=seed)
    return z_scores(succ, _marginal(prior, seed))


MEMBERS = {
    "inverse-gamma": (IG, SweepOptions(column_moves=False)),
    "discrete+fused-moves": (DISCRETE, SweepOptions(column_moves=True)),
    "discrete+moves-at-end": (
        DISCRETE,
        SweepOptions(column_moves=True, fuse_column_moves=False, column_moves_every=1),
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        "inverse-gamma",
        pytest.param("discrete+fused-moves", marks=pytest.mark.slow),
        pytest.param("discrete+moves-at-end", marks=pytest.mark.slow),
    ],
)
def test_geweke_one_class_biases(x64, name):
    prior, options = MEMBERS[name]
    z, z_crit = _geweke_z(prior, options)
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: max |z| = {np.max(np.abs(z)):.2f} >= {z_crit:.2f}; z = {np.round(z, 2)}"
    )


def _drop_shared(what):
    """A ``row_sums`` whose biases' sums over every pair lack one shared ``c0`` term:
    ``"count"`` the ``c0 m`` of the biases' precisions, ``"sumBO"`` the ``c0 sum_j c_j
    F_j`` of the rows' right-hand sides."""
    row_sums = gibbs_rows.row_sums

    def wrong(csr, other, bias_other, use_bias, values, packed, weights, unrated):
        sums = row_sums(csr, other, bias_other, use_bias, values, packed, weights, unrated)
        if what == "count":
            return sums._replace(count=sums.count - unrated * other.shape[1])
        shared = unrated * jnp.einsum("cj,cjk->ck", bias_other, other)[:, None]
        return sums._replace(sumBO=sums.sumBO - shared)

    return wrong


@pytest.mark.parametrize("what", ["count", "sumBO"], ids=["c0-m", "c0-Nc"])
def test_geweke_one_class_biases_detects_missing_shared_terms(x64, monkeypatch, what):
    """Biases whose precisions lack ``c0 m`` (the unrated pairs' count), or factor rows
    whose right-hand sides lack ``c0 N^T c``, are detected: by the z-scores, or by chains
    that diverge (without ``c0 m`` the biases' means are inflated on both sides, and the
    common shift of ``b`` against ``c`` grows geometrically)."""
    monkeypatch.setattr(gibbs_rows, "row_sums", _drop_shared(what))
    succ = _successive(IG, SweepOptions(column_moves=False), 100, 200, seed=0)
    if not np.all(np.isfinite(succ)):  # diverged: a correct sweep never does (z_scores)
        return
    z, z_crit = z_scores(succ, _marginal(IG, seed=0))
    assert np.max(np.abs(z)) > 2 * z_crit, f"not detected: max |z| = {np.max(np.abs(z)):.2f}"


# --------------------------------------------------------------------------- fits
def _planted_data():
    """Pairs of a rank-2 pattern plus a popular column and an active row."""
    rng = np.random.default_rng(3)
    U, V = rng.random((20, 2)), rng.random((18, 2))
    X = U @ V.T > 0.6
    X[:, 4] = X[7, :] = True
    rows, cols = np.nonzero(X)
    return bmc.RatingData(rows, cols, np.ones(rows.size), (20, 18)), X


def test_fit_with_biases_runs_in_both_dtypes(dtype):
    """A short fit with biases in float32 and in float64: finite scores and biases of the
    dtype, observed pairs scored above the average pair, the popular column's bias above
    the others' mean."""
    data, X = _planted_data()
    fit = bmc.fit(
        data,
        K=2,
        prior=bmc.priors.InverseGamma(),
        likelihood=bmc.likelihoods.OneClass(alpha=4.0, c0=0.5),
        biases=True,
        num_warmup=20,
        num_samples=40,
        num_chains=2,
        seed=0,
        progress_bar=False,
        dtype=dtype,
    )
    assert fit.info.dtype == np.dtype(dtype).name and fit.info.shift.offset == 0.0
    col_bias = np.asarray(fit.samples["col_bias"])
    assert col_bias.dtype == np.dtype(dtype) and np.all(np.isfinite(col_bias))
    assert col_bias.mean(axis=(0, 1))[4] > col_bias.mean()
    r, c = np.divmod(np.arange(20 * 18), 18)
    score = fit.predict(r, c)
    assert np.all(np.isfinite(score))
    assert score.reshape(20, 18)[X].mean() > score.mean()


def test_saved_fit_with_biases_predicts_what_the_fit_predicted(tmp_path):
    data = _implicit_data()
    kw = dict(num_warmup=5, num_samples=10, num_chains=2, progress_bar=False, biases=True)
    fit = bmc.fit(data, K=2, prior=bmc.priors.InverseGamma(), likelihood=LIK, **kw)
    fit.save(tmp_path / "one_class_biases.npz")
    back = bmc.load(tmp_path / "one_class_biases.npz")
    assert back.info.likelihood == LIK and back.info.biases == fit.info.biases
    r, c = np.divmod(np.arange(40), 15)
    assert np.array_equal(fit.predict(r, c), back.predict(r, c))


def test_model_density_with_biases_is_the_gaussian_over_every_pair(x64):
    """The model's log joint at given ``M``, ``N``, biases and their variances: the priors
    plus the Gaussian log density of the preferences at ``M N^T + b 1^T + 1 c^T`` with the
    confidences, summed over every pair."""
    from numpyro.infer.util import log_density
    from scipy import stats

    data = _implicit_data(m1=7, m2=6, density=0.3)
    prior, biases = bmc.priors.Fixed(0.7), bmc.offsets.Biases(a=3.0, b=2.0)
    rng = np.random.default_rng(4)
    M, N = rng.standard_normal((7, 2)), rng.standard_normal((6, 2))
    b, c, vb, vc = rng.standard_normal(7), rng.standard_normal(6), 0.8, 1.3
    params = dict(M=M, N=N, row_bias=b, col_bias=c, row_bias_var=vb, col_bias_var=vc)
    model = bmc.models.matrix_completion
    lp, _ = log_density(model, (data, 2, prior), {"likelihood": LIK, "biases": biases}, params)
    P, C = LIK.pair_arrays(data)
    theta = M @ N.T + b[:, None] + c[None, :]
    want = stats.norm.logpdf(P, theta, 1.0 / np.sqrt(LIK.lam * C)).sum()
    want += stats.norm.logpdf(np.r_[M.ravel(), N.ravel()], 0.0, 0.7**0.5).sum()
    want += stats.norm.logpdf(b, 0.0, vb**0.5).sum() + stats.norm.logpdf(c, 0.0, vc**0.5).sum()
    want += stats.invgamma.logpdf([vb, vc], biases.a, scale=biases.b).sum()
    assert float(lp) == pytest.approx(want, rel=1e-12)
