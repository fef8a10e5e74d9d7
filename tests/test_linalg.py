"""The shared hot path (``bmczoo.linalg``) against naive dense references.

Everything is compared in float64 with a dense numpy computation of

    P_i = diag(w) + tau * sum_{j in J_i} S_j,      r_i = tau * sum_{j in J_i} Y_ij F_j

on a small random problem that has rows and columns without any rating, for several
chains at once (chains are stacked as extra columns of one sparse product), and column
counts that are and are not multiples of the padding of the sparse products.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import linalg as kr


def _problem(seed=0, m1=9, m2=7, n=25):
    rng = np.random.default_rng(seed)
    # rows 0 and 5 and column 3 have no rating
    allowed = np.array([(i, j) for i in range(m1) for j in range(m2) if i not in (0, 5) and j != 3])
    pick = allowed[rng.choice(len(allowed), size=n, replace=False)]
    vals = rng.normal(size=n)
    data = bmc.RatingData(pick[:, 0], pick[:, 1], vals, (m1, m2))
    Y = np.zeros((m1, m2))
    mask = np.zeros((m1, m2), bool)
    Y[pick[:, 0], pick[:, 1]] = vals
    mask[pick[:, 0], pick[:, 1]] = True
    return data, Y, mask, rng


def _dense_reference(Y, mask, S, F, w, tau):
    """P (C, m, K, K) and r (C, m, K) by explicit loops over rows and ratings."""
    C, _, K = F.shape
    m = Y.shape[0]
    P = np.zeros((C, m, K, K))
    r = np.zeros((C, m, K))
    for c in range(C):
        for i in range(m):
            P[c, i] = np.diag(w[c])
            for j in np.flatnonzero(mask[i]):
                P[c, i] += tau * S[c, j]
                r[c, i] += tau * Y[i, j] * F[c, j]
    return P, r


def _spd_moments(rng, C, m, K):
    """VB-like second moments W_j + n_j n_j^T (symmetric positive definite)."""
    A = rng.normal(size=(C, m, K, K))
    W = A @ np.swapaxes(A, -1, -2) / K
    F = rng.normal(size=(C, m, K))
    return W + F[..., :, None] * F[..., None, :], F


@pytest.mark.parametrize("K", [1, 4, 10])
@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("side", ["rows", "cols"])
def test_precision_and_rhs_match_dense_reference(x64, K, C, side):
    data, Y, mask, rng = _problem(seed=K + 10 * C)
    if side == "cols":
        Y, mask = Y.T, mask.T
        view, shape = data.col_view, data.shape[::-1]
    else:
        view, shape = data.row_view, data.shape
    m, m_other = shape
    csr = kr.csr_from_view(view, shape, jnp.float64)
    S, F = _spd_moments(rng, C, m_other, K)
    w = rng.uniform(0.5, 2.0, size=(C, K))
    tau = 1.7
    P_ref, r_ref = _dense_reference(Y, mask, S, F, w, tau)

    P = np.asarray(kr.row_precision(csr, jnp.asarray(S), jnp.asarray(w), tau))
    r = np.asarray(kr.row_rhs(csr, jnp.asarray(F), tau))
    assert P.shape == (C, m, K, K) and r.shape == (C, m, K)
    np.testing.assert_allclose(P, P_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r, r_ref, rtol=1e-12, atol=1e-12)
    # rows without ratings: the prior alone
    empty = np.flatnonzero(~mask.any(axis=1))
    assert empty.size > 0
    for c in range(C):
        np.testing.assert_array_equal(
            P[c, empty], np.broadcast_to(np.diag(w[c]), (empty.size, K, K))
        )
        np.testing.assert_array_equal(r[c, empty], 0.0)
    # exactly symmetric
    np.testing.assert_array_equal(P, np.swapaxes(P, -1, -2))

    # the Gibbs form: second moments are outer products of the factor
    P_gibbs = np.asarray(kr.row_precision(csr, kr.outer(jnp.asarray(F)), jnp.asarray(w), tau))
    P_ref_gibbs, _ = _dense_reference(Y, mask, F[..., :, None] * F[..., None, :], F, w, tau)
    np.testing.assert_allclose(P_gibbs, P_ref_gibbs, rtol=1e-12, atol=1e-12)

    # jit gives the same as eager, and chain c does not depend on the other chains
    P_jit = np.asarray(
        jax.jit(lambda s, ww: kr.row_precision(csr, s, ww, tau))(jnp.asarray(S), jnp.asarray(w))
    )
    np.testing.assert_allclose(P_jit, P, rtol=1e-13, atol=1e-13)
    P_c = np.asarray(kr.row_precision(csr, jnp.asarray(S[-1:]), jnp.asarray(w[-1:]), tau))
    np.testing.assert_allclose(P_c[0], P[-1], rtol=1e-13, atol=1e-13)


def test_float32_close_to_float64_reference():
    data, Y, mask, rng = _problem(seed=3)
    C, K = 2, 10
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float32)
    S, F = _spd_moments(rng, C, data.shape[1], K)
    w = rng.uniform(0.5, 2.0, size=(C, K))
    P_ref, r_ref = _dense_reference(Y, mask, S, F, w, 0.9)
    P = kr.row_precision(csr, jnp.asarray(S, jnp.float32), jnp.asarray(w, jnp.float32), 0.9)
    r = kr.row_rhs(csr, jnp.asarray(F, jnp.float32), 0.9)
    assert P.dtype == jnp.float32 and r.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(P), P_ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(r), r_ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("cols", [None, 1, 3, 7, 8, 9, 16, 55, 100])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_csr_matmul_matches_dense_for_any_column_count(x64, cols, dtype):
    data, Y, mask, rng = _problem(seed=1)
    csr = kr.csr_from_view(data.row_view, data.shape, dtype)
    shape = (data.shape[1],) if cols is None else (data.shape[1], cols)
    D = rng.normal(size=shape)
    out = kr.csr_matmul(csr.indptr, csr.index, csr.values, csr.shape, jnp.asarray(D, dtype))
    assert out.shape == (data.shape[0],) + shape[1:]
    assert out.dtype == jnp.dtype(dtype)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(np.asarray(out), Y @ D, rtol=tol, atol=tol)


@pytest.mark.parametrize("K", [1, 2, 5, 10])
def test_pack_unpack_roundtrip(x64, K):
    rng = np.random.default_rng(K)
    A = rng.normal(size=(2, 3, K, K))
    S = A + np.swapaxes(A, -1, -2)
    packed = kr.pack_upper(jnp.asarray(S))
    assert packed.shape == (2, 3, K * (K + 1) // 2)
    iu = np.triu_indices(K)
    np.testing.assert_array_equal(np.asarray(packed), S[..., iu[0], iu[1]])
    np.testing.assert_array_equal(np.asarray(kr.unpack_upper(packed, K)), S)


@pytest.mark.parametrize("K", [1, 3, 10])
def test_cholesky_sample_and_solve_match_dense_reference(x64, K):
    rng = np.random.default_rng(100 + K)
    C, m = 2, 6
    A = rng.normal(size=(C, m, K, K + 2))
    P = A @ np.swapaxes(A, -1, -2) + 0.3 * np.eye(K)
    rhs = rng.normal(size=(C, m, K))
    z = rng.normal(size=(C, m, K))

    L = np.asarray(kr.cholesky_rows(jnp.asarray(P)))
    np.testing.assert_allclose(L, np.linalg.cholesky(P), rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(np.triu(L, 1), 0.0)

    mean = np.linalg.solve(P, rhs[..., None])[..., 0]
    np.testing.assert_allclose(
        np.asarray(kr.solve_rows(jnp.asarray(L), jnp.asarray(rhs))), mean, rtol=1e-10, atol=1e-10
    )

    # x = P^{-1} rhs + L^{-T} z  (so that Cov(x) = L^{-T} L^{-1} = P^{-1})
    noise = np.linalg.solve(np.swapaxes(L, -1, -2), z[..., None])[..., 0]
    x = np.asarray(kr.sample_rows(jnp.asarray(L), jnp.asarray(rhs), jnp.asarray(z)))
    np.testing.assert_allclose(x, mean + noise, rtol=1e-10, atol=1e-10)
    # z = 0 gives the mean
    x0 = np.asarray(kr.sample_rows(jnp.asarray(L), jnp.asarray(rhs), jnp.zeros((C, m, K))))
    np.testing.assert_allclose(x0, mean, rtol=1e-10, atol=1e-10)


def test_cholesky_is_nan_where_not_positive_definite(x64):
    P = np.stack([np.eye(3) * 2.0, np.diag([1.0, -1.0, 1.0])])[None]
    L = np.asarray(kr.cholesky_rows(jnp.asarray(P)))
    assert np.all(np.isfinite(L[0, 0]))
    assert np.any(np.isnan(L[0, 1]))


def test_sample_rows_covariance_is_inverse_precision(x64):
    """Statistical check: many draws for one precision have covariance P^{-1}."""
    rng = np.random.default_rng(7)
    K, draws = 3, 40_000
    A = rng.normal(size=(K, K))
    P = A @ A.T + np.eye(K)
    rhs = rng.normal(size=K)
    L = kr.cholesky_rows(jnp.asarray(np.broadcast_to(P, (1, draws, K, K))))
    z = jax.random.normal(jax.random.key(0), (1, draws, K), jnp.float64)
    x = np.asarray(kr.sample_rows(L, jnp.broadcast_to(jnp.asarray(rhs), (1, draws, K)), z))[0]
    cov = np.linalg.inv(P)
    mean = cov @ rhs
    se = np.sqrt(np.diag(cov) / draws)
    assert np.all(np.abs(x.mean(axis=0) - mean) < 5 * se)
    # sample covariance within a few percent of the truth (relative to the diagonal scale)
    scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert np.max(np.abs(np.cov(x.T) - cov) / scale) < 0.05


def test_gibbs_sweep_uses_the_kernels_consistently(x64):
    """One Gibbs factor update assembled from the kernels equals the dense computation."""
    data, Y, mask, rng = _problem(seed=5)
    K, C, tau = 4, 2, 1.3
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64)
    N = rng.normal(size=(C, data.shape[1], K))
    w = rng.uniform(0.5, 2.0, size=(C, K))
    z = rng.normal(size=(C, data.shape[0], K))
    P = kr.row_precision(csr, kr.outer(jnp.asarray(N)), jnp.asarray(w), tau)
    M = np.asarray(
        kr.sample_rows(kr.cholesky_rows(P), kr.row_rhs(csr, jnp.asarray(N), tau), jnp.asarray(z))
    )
    P_ref, r_ref = _dense_reference(Y, mask, N[..., :, None] * N[..., None, :], N, w, tau)
    L_ref = np.linalg.cholesky(P_ref)
    M_ref = (
        np.linalg.solve(P_ref, r_ref[..., None])[..., 0]
        + np.linalg.solve(np.swapaxes(L_ref, -1, -2), z[..., None])[..., 0]
    )
    np.testing.assert_allclose(M, M_ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("rho", [-0.7, 0.5])
def test_overrelaxed_rows_keep_the_conditional_exactly(rho):
    """x' = mu + rho (x - mu) + sqrt(1 - rho^2) L^{-T} z is affine in (x, z): its mean
    given x is mu + rho (x - mu) and its covariance (1 - rho^2) P^{-1}, so x ~ N(mu, P^{-1})
    implies x' ~ N(mu, P^{-1}) (rho^2 + 1 - rho^2 = 1).  Checked exactly in float64 on
    random precisions: the affine map's offset and its z- and x-coefficients."""
    from bmczoo.linalg import cholesky_rows, overrelaxed_rows, sample_rows, solve_rows

    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        B, K = 6, 4
        A = rng.normal(size=(B, K, K))
        P = jnp.asarray(A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(K))
        rhs = jnp.asarray(rng.normal(size=(B, K)))
        L = cholesky_rows(P)
        mu = solve_rows(L, rhs)
        x = jnp.asarray(rng.normal(size=(B, K)))
        f = lambda x, z: overrelaxed_rows(L, rhs, z, x, rho)  # noqa: E731
        zero = jnp.zeros((B, K))
        np.testing.assert_allclose(f(x, zero), mu + rho * (x - mu), rtol=1e-12, atol=1e-12)
        # z-coefficient: columns of sqrt(1 - rho^2) L^{-T}; its Gram matrix is (1 - rho^2) P^{-1}
        Jz = jnp.stack(
            [f(x, jnp.broadcast_to(e, (B, K))) - f(x, zero) for e in jnp.eye(K)], axis=-1
        )
        np.testing.assert_allclose(
            Jz @ jnp.swapaxes(Jz, -1, -2), (1 - rho**2) * jnp.linalg.inv(P), rtol=1e-10, atol=1e-12
        )
        # rho = 0 is the plain draw
        z = jnp.asarray(rng.normal(size=(B, K)))
        np.testing.assert_array_equal(overrelaxed_rows(L, rhs, z, x, 0.0), sample_rows(L, rhs, z))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("K", [1, 3, 10, 33])
def test_draw_rows_one_factorisation_equals_the_two_solves(x64, K, dtype):
    """``draw_rows`` (one Cholesky factorisation of the bordered ``[[P, rhs], [rhs^T, s]]``
    and one solve) is ``overrelaxed_rows(cholesky_rows(P), ...)`` up to rounding, with and
    without over-relaxation, and NaN exactly on the rows whose ``P`` is not positive
    definite or whose right-hand side is not finite.  Tolerance: both are backward stable,
    so each differs from the float64 dense draw by at most a few ``K cond(P) eps``."""
    rng = np.random.default_rng(40 + K)
    C, m = 2, 5
    A = rng.normal(size=(C, m, K, K + 3))
    P = A @ np.swapaxes(A, -1, -2) / (K + 3) + 0.2 * np.eye(K)
    rhs, z, x = (rng.normal(size=(C, m, K)) * 3 for _ in range(3))
    eps = np.finfo(dtype).eps
    tol = 8 * K * np.max(np.linalg.cond(P)) * eps
    L = np.linalg.cholesky(P)
    for rho in (0.0, -0.7, 0.5):
        got = np.asarray(kr.draw_rows(*(jnp.asarray(a, dtype) for a in (P, rhs, z, x)), rho=rho))
        old = np.asarray(
            kr.overrelaxed_rows(
                kr.cholesky_rows(jnp.asarray(P, dtype)),
                *(jnp.asarray(a, dtype) for a in (rhs, z, x)),
                rho,
            )
        )
        # the exact draw in float64: L^{-T} [(1 - rho) L^{-1} rhs + sqrt(1 - rho^2) z + rho L^T x]
        y = np.linalg.solve(L, rhs[..., None])[..., 0]
        u = (1 - rho) * y + np.sqrt(1 - rho**2) * z + rho * np.einsum("...kj,...k->...j", L, x)
        exact = np.linalg.solve(np.swapaxes(L, -1, -2), u[..., None])[..., 0]
        scale = np.max(np.abs(exact))
        assert got.dtype == dtype
        assert np.max(np.abs(got - exact)) <= tol * scale
        assert np.max(np.abs(old - exact)) <= tol * scale
    bad_P = P.copy()
    bad_P[0, 1] = -np.eye(K)
    bad_rhs = rhs.copy()
    bad_rhs[1, 3, 0] = np.nan
    out = np.asarray(
        kr.draw_rows(jnp.asarray(bad_P, dtype), jnp.asarray(bad_rhs, dtype), jnp.asarray(z, dtype))
    )
    bad = ~np.isfinite(out).all(axis=-1)
    assert bad.tolist() == [[i == 1 for i in range(m)], [i == 3 for i in range(m)]]
    assert np.isnan(out[bad]).all()


@pytest.mark.parametrize("K", [1, 4])
def test_full_prior_precision_and_prior_mean_term(x64, K):
    """The hot path takes a full K x K prior precision shared by the rows and a prior-mean
    term ``Lambda mu`` (a hierarchical row prior plugs in without touching it)."""
    data, Y, mask, rng = _problem(seed=7 + K)
    m, m_other = data.shape
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64)
    C = 2
    S, F = _spd_moments(rng, C, m_other, K)
    A = rng.normal(size=(C, K, K))
    Lam = A @ np.swapaxes(A, -1, -2) + K * np.eye(K)
    shift = rng.normal(size=(C, K))
    tau = 0.8
    zero = np.zeros((C, K))
    P_ref, r_ref = _dense_reference(Y, mask, S, F, zero, tau)
    P = np.asarray(kr.row_precision(csr, jnp.asarray(S), jnp.asarray(Lam), tau))
    r = np.asarray(kr.row_rhs(csr, jnp.asarray(F), tau, prior_shift=jnp.asarray(shift)))
    np.testing.assert_allclose(P, P_ref + Lam[:, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r, r_ref + shift[:, None, :], rtol=1e-12, atol=1e-12)
    # a diagonal given as a full matrix is the same as the (C, K) form
    w = rng.uniform(0.5, 2.0, size=(C, K))
    full = np.asarray(
        kr.row_precision(csr, jnp.asarray(S), jnp.asarray(w[:, :, None] * np.eye(K)), tau)
    )
    diag = np.asarray(kr.row_precision(csr, jnp.asarray(S), jnp.asarray(w), tau))
    np.testing.assert_array_equal(full, diag)
    with pytest.raises(ValueError, match="prior_precision must have shape"):
        kr.row_precision(csr, jnp.asarray(S), jnp.zeros((C, K + 1, K + 1)), tau)


@pytest.mark.parametrize("K", [1, 3, 10])
@pytest.mark.parametrize("use_bias", [False, True])
def test_sweep_residual_sum_matches_the_ratings(x64, K, use_bias):
    """The half sweeps' ``SSE - sum Y^2`` (what the learned noise draws from) equals the
    residual sum over the ratings with the new factors and biases, computed directly."""
    from bmczoo.inference import sharding as sh
    from bmczoo.inference.gibbs import rows as gr

    data, Y, mask, rng = _problem(seed=11, m1=9, m2=7, n=30)
    C = 2
    m1, m2 = data.shape
    rows = kr.csr_from_view(data.row_view, data.shape, jnp.float64)
    cols = kr.csr_from_view(data.col_view, data.shape[::-1], jnp.float64)
    M, N = rng.normal(size=(C, m1, K)), rng.normal(size=(C, m2, K))
    b, c = rng.normal(size=(C, m1)), rng.normal(size=(C, m2))
    zM, zN, zb, zc = (rng.normal(size=s) for s in ((C, m1, K), (C, m2, K), (C, m1), (C, m2)))
    A = rng.normal(size=(C, K, K))
    Lam = A @ np.swapaxes(A, -1, -2) / K + np.eye(K)
    priors = tuple((jnp.asarray(Lam), jnp.asarray(rng.normal(size=(C, K)))) for _ in range(2))
    tb, inv_var = jnp.asarray([0.7, 1.3]), jnp.asarray(rng.uniform(0.5, 2.0, size=(C, 2)))
    M, N, b, c, zM, zN, zb, zc = map(jnp.asarray, (M, N, b, c, zM, zN, zb, zc))
    out = gr._sweep_body(
        rows,
        cols,
        gr.FactorRows(M, N, b, c),
        gr.FactorRows(zM, zN, zb, zc),
        gr.SweepConditional(priors, tb, inv_var),
        sh.LOCAL,
        gr.SweepFlags(rho=0.0, use_bias=use_bias, sse=True),
        lambda F: jnp.sum(F, axis=1),
    )
    M2, N2, b2, c2 = (np.asarray(x) for x in (out.M, out.N, out.b, out.c))
    part = np.asarray(out.stats.part)
    i, j = np.nonzero(mask)
    for ch in range(C):
        fit = np.sum(M2[ch, i] * N2[ch, j], axis=-1)
        if use_bias:
            fit = fit + b2[ch, i] + c2[ch, j]
        want = np.sum((Y[i, j] - fit) ** 2) - np.sum(Y[i, j] ** 2)
        np.testing.assert_allclose(part[ch], want, rtol=1e-10, atol=1e-10)


def test_features_product_equals_the_dense_product():
    """``features_product`` (the NumPyro models' links) is ``X @ W`` without the dense
    table, for tables with empty rows, vectors and matrices ``W``, and its gradient."""
    from bmczoo.data import Features

    rng = np.random.default_rng(0)
    dense = rng.normal(size=(9, 6)) * (rng.random((9, 6)) < 0.4)
    dense[[0, 4, 8]] = 0.0  # empty rows, first and last included
    X = Features.from_dense(dense)
    with jax.enable_x64(True):
        for W in (rng.normal(size=6), rng.normal(size=(6, 3))):
            W = jnp.asarray(W)
            np.testing.assert_allclose(kr.features_product(X, W), dense @ W, rtol=1e-13, atol=1e-13)
        G = rng.normal(size=(9, 3))
        grad = jax.grad(lambda W: jnp.sum(kr.features_product(X, W) * G))(jnp.zeros((6, 3)))
        np.testing.assert_allclose(grad, dense.T @ G, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("rho", [0.0, -0.5])
def test_row_draw_options_give_the_same_sweeps_up_to_rounding(x64, rho):
    """``SweepOptions(row_draw=...)``: the bordered factorisation (the default) and the two
    solves draw the same rows from the same normals, up to float64 rounding, through whole
    sweeps of the recommended member (biases, learned noise, Normal-Wishart rows)."""
    from bmczoo.inference import gibbs
    from bmczoo.inference.settings import SweepOptions

    data, _, _, _ = _problem(seed=11, m1=12, m2=9, n=60)
    prior = bmc.priors.NormalWishart()
    states = {}
    for draw in kr.ROW_DRAWS:
        problem = gibbs.build_problem(
            data,
            tau=1.0,
            dtype=jnp.float64,
            likelihood=bmc.likelihoods.LearnedNoise(),
            biases=bmc.offsets.Biases(),
            options=SweepOptions(column_moves=False, overrelax=rho, row_draw=draw),
        )
        s = gibbs.init(jax.random.split(jax.random.key(2), 2), problem, prior, 3)
        for _ in range(3):
            s = gibbs.step(s, problem, prior)
        states[draw] = s
    a, b = states["bordered"], states["two-solves"]
    for name in ("M", "N", "row_bias", "col_bias"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        # a few sweeps carry the rounding of each draw into the next: far below 1e-9
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-9 * np.max(np.abs(y)))
    assert not np.array_equal(np.asarray(a.M), np.asarray(b.M))  # two computations
