"""The feature link's decomposition on the rows (``X X^T``, m x m) for tables with many more
features than rows (docs/algorithms.md, "Feature links (side information)"), against the
decomposition on the features (``X^T X``, F x F) in float64: the rule that chooses
between them, the identities on the range, the sweep's conditionals (equal up to the
eigenvectors' signs, which are aligned), the recovery of ``B`` from its coordinates, the
null-space draw of the kept ``B`` (its exact covariance), and the size guard.  The Geweke
test of the sweep with the row decomposition is in
``tests/inference/test_geweke_macau_gram.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.priors import macau
from bmczoo.priors.macau import arrays, eigen

pytestmark = pytest.mark.usefixtures("x64")

M, F, K = 6, 15, 2
RTOL = 1e-10  # float64 rounding of O(n^3) operations on O(1) numbers


def _pair(seed=0, m=M, f=F):
    """A wide table of rank ``m - 1`` (a repeated combination of rows, a zero column) and
    its arrays through both decompositions, with the row decomposition's eigenvector signs
    aligned to the feature one's: ``sign`` (r,)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, f))
    X[:, 3] = 0.0
    X[m - 2] = X[0] + X[1]
    feats = bmc.data.Features.from_dense(X)
    a = macau.link_arrays(feats, jnp.float64, gram=False)
    b = macau.link_arrays(feats, jnp.float64, gram=True)
    sign = np.sign(np.sum(np.asarray(a["XV"]) * np.asarray(b["XV"]), axis=0))
    return X, a, b, sign


def _flip(Bt, sign):
    """Coordinates in the other path's basis: the range rows (the last r) times ``sign``."""
    r = sign.shape[0]
    return Bt.at[..., -r:, :].multiply(sign[:, None])


def test_the_rule_keeps_the_feature_decomposition_for_movielens_100k():
    # ML-100K: users' implicit feedback (943 x 1,682), with the side tables beside it
    # (943 x ~1,738), items' (1,682 x 943): all on the features, as before
    for m, f in [(943, 1682), (943, 1738), (1682, 943), (1682, 1682 + 56), (100, 4096)]:
        assert not eigen.use_gram(m, f)
    # ML-1M's items (3,706 x 6,040 users) and ML-10M's (10,677 x 69,878): on the rows
    for m, f in [(3706, 6040), (10677, 69878), (100, 4097)]:
        assert eigen.use_gram(m, f)
    assert not eigen.use_gram(69878, 10677) and not eigen.use_gram(5000, 5000)


def test_link_arrays_follow_the_rule(monkeypatch):
    X, *_ = _pair()
    feats = bmc.data.Features.from_dense(X)
    assert "V" in macau.link_arrays(feats, jnp.float64)  # F = 15 <= GRAM_MIN_FEATURES
    monkeypatch.setattr(eigen, "GRAM_MIN_FEATURES", F - 1)
    link = macau.link_arrays(feats, jnp.float64)
    assert "V" not in link and "Vr" not in link and link["XV"].shape == (M, M - 1)
    tall = bmc.data.Features.from_dense(X.T)  # more rows than features: always on the features
    assert "V" in macau.link_arrays(tall, jnp.float64)


def test_the_row_decomposition_is_the_feature_one_on_the_range():
    X, a, b, sign = _pair()
    r = M - 1
    assert b["XV"].shape == a["XV"].shape == (M, r)
    d = np.asarray(a["d"])
    np.testing.assert_allclose(np.asarray(b["d"]), d, rtol=RTOL, atol=RTOL * d.max())
    assert np.all(np.asarray(b["d"])[: F - r] == 0.0) and np.all(d[: F - r] == 0.0)
    np.testing.assert_allclose(np.asarray(b["XV"]) * sign, np.asarray(a["XV"]), atol=RTOL)
    u = np.asarray(b["u"])
    assert np.all(u[: F - r] == 0.0)
    np.testing.assert_allclose(u[F - r :] * sign, np.asarray(a["u"])[F - r :], atol=RTOL)
    # V_r = X^T U_r S^{-1/2}: the feature decomposition's eigenvectors on the range
    Bt = jnp.zeros((1, F, r)).at[0, F - r :, :].set(jnp.eye(r))
    Vr = np.asarray(macau.links_of(b, Bt))[0]
    np.testing.assert_allclose(Vr * sign, np.asarray(a["Vr"]), atol=RTOL)


def test_products_and_recovered_links_are_the_same():
    X, a, b, sign = _pair()
    rng = np.random.default_rng(3)
    Bt = jnp.asarray(rng.normal(size=(2, F, K)))
    E = jnp.asarray(rng.normal(size=(2, M, K)))
    np.testing.assert_allclose(
        macau.coords_mean(b, _flip(Bt, sign)), macau.coords_mean(a, Bt), rtol=RTOL, atol=RTOL
    )
    np.testing.assert_allclose(
        _flip(macau.coords_stats(b, E), sign), macau.coords_stats(a, E), rtol=RTOL, atol=RTOL
    )
    # B from the coordinates: the range part, exactly V Bt with the null coordinates zero
    r = M - 1
    range_only = Bt.at[:, : F - r].set(0.0)
    np.testing.assert_allclose(
        macau.links_of(b, _flip(Bt, sign)), macau.links_of(a, range_only), atol=RTOL
    )
    np.testing.assert_allclose(
        np.einsum("mf,cfk->cmk", X, macau.links_of(b, Bt)), macau.coords_mean(b, Bt), atol=RTOL
    )


def _chain_inputs(seed=4):
    rng = np.random.default_rng(seed)
    R = rng.normal(size=(K, K))
    Mf = rng.normal(size=(M, K))
    return (
        jnp.asarray(rng.normal(size=K)),
        jnp.asarray(R @ R.T + K * np.eye(K)),
        jnp.asarray(Mf),
        jnp.asarray(rng.normal(size=(F, K))),
    )


def test_the_sweeps_conditionals_are_the_same():
    """``B``'s draw (linear in its normals, so the same normals in the aligned basis give
    the same draw), ``lam_B``'s and ``(mu, Lambda)``'s conditionals."""
    _, a, b, sign = _pair()
    mu, Lam, Mf, Z = _chain_inputs()
    lam = 0.7
    Gt_a = macau.coords_stats(a, Mf[None])[0]
    Gt_b = macau.coords_stats(b, Mf[None])[0]
    Bt_a = macau.b_draw(a, mu, Lam, lam, Gt_a, Z)
    Bt_b = macau.b_draw(b, mu, Lam, lam, Gt_b, _flip(Z, sign))
    np.testing.assert_allclose(Bt_b, _flip(Bt_a, sign), rtol=RTOL, atol=RTOL)
    for f, g in zip(
        macau.lam_conditional(Bt_b, Lam, 1.5, 0.5), macau.lam_conditional(Bt_a, Lam, 1.5, 0.5)
    ):
        np.testing.assert_allclose(f, g, rtol=RTOL)
    args = (Mf.sum(0), Mf.T @ Mf)
    out_b = macau.nw_link_conditional(b, Bt_b, lam, *args, Gt_b, M, 2.0, K + 1.0, jnp.eye(K))
    out_a = macau.nw_link_conditional(a, Bt_a, lam, *args, Gt_a, M, 2.0, K + 1.0, jnp.eye(K))
    for f, g in zip(out_b, out_a):
        np.testing.assert_allclose(f, g, rtol=RTOL, atol=RTOL)


def test_vb_updates_are_the_same():
    _, a, b, sign = _pair()
    mu, Lam, Mf, _ = _chain_inputs()
    Gt_a = macau.coords_stats(a, Mf[None])[0]
    Gt_b = macau.coords_stats(b, Mf[None])[0]
    qa = macau.vb_b_update(a, mu, Lam, 0.7, Gt_a)
    qb = macau.vb_b_update(b, mu, Lam, 0.7, Gt_b)
    np.testing.assert_allclose(qb.Bt, _flip(qa.Bt, sign), rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(qb.a, qa.a, rtol=RTOL)
    # the reported mean of q(B): its null part is zero, so the range part is all of it
    np.testing.assert_allclose(
        macau.links_of(b, qb.Bt[None]), macau.links_of(a, qa.Bt[None]), atol=RTOL
    )


def test_the_null_part_is_the_null_coordinates_distribution():
    """``null_part`` is linear in its normals: its covariance ``J J^T`` is exactly
    ``V_null V_null^T kron (lam_B Lambda)^{-1}`` (the law of ``V_null Bt_null``)."""
    X, a, b, _ = _pair()
    _, Lam, _, _ = _chain_inputs()
    lam = 0.7

    def draw(z):
        return arrays.null_part(b, z.reshape(1, F, K), Lam[None], jnp.asarray([lam])).reshape(-1)

    J = np.asarray(jax.jacfwd(draw)(jnp.zeros(F * K)))
    Vn = np.asarray(a["V"])[:, : F - (M - 1)]
    cov = np.kron(Vn @ Vn.T, np.linalg.inv(lam * np.asarray(Lam)))
    np.testing.assert_allclose(J @ J.T, cov, atol=RTOL)
    np.testing.assert_allclose(X @ J.reshape(F, K, F * K)[:, 0], 0.0, atol=RTOL)


def test_stored_links_draw_the_null_part():
    _, a, b, sign = _pair()
    _, Lam, _, _ = _chain_inputs()
    Bt = jnp.asarray(np.random.default_rng(5).normal(size=(3, F, K)))
    state = {"Bt_M": Bt, "lam_B_M": jnp.full(3, 0.7), "Lambda_M": jnp.broadcast_to(Lam, (3, K, K))}
    plain = macau.stored_links(state, {f"M/{k}": v for k, v in a.items()})["B_M"]
    np.testing.assert_allclose(plain, macau.links_of(a, Bt), rtol=RTOL)  # V Bt, no keys
    links = {f"M/{k}": v for k, v in b.items()}
    with pytest.raises(ValueError, match="keys"):
        macau.stored_links(state, links)
    keys = jax.random.split(jax.random.key(0), 3)
    B = macau.stored_links(state, links, keys)["B_M"]
    # the range part is the state's; the rest is orthogonal to X's row space
    Vr = np.asarray(a["Vr"]) * sign
    np.testing.assert_allclose(
        np.einsum("fr,cfk->crk", Vr, B), np.asarray(Bt)[:, F - (M - 1) :], atol=RTOL
    )
    assert float(jnp.max(jnp.abs(B - macau.links_of(b, Bt)))) > 0.1  # a null part was drawn


def test_size_guard_names_the_side_and_the_memory():
    with pytest.raises(ValueError, match=r"cols \(10677 rows, 69878 features\).*10677 x 10677"):
        eigen.check_size(10677, 69878, True, "cols", memory=2 << 30)
    eigen.check_size(10677, 69878, True, "cols", memory=64 << 30)
    with pytest.raises(ValueError, match="69878 x 69878.*implicit='rows'"):
        eigen.check_size(10677, 69878, False, "cols", memory=64 << 30)


def test_link_arrays_refuse_a_huge_table_before_allocating():
    """A table of 200,000 rows and 300,000 features with one entry (its arrays are tiny):
    the row decomposition would hold 200,000 x 200,000 float64 matrices (1.3 TB), refused
    from the shape."""
    m, f = 200_000, 300_000
    indptr = np.ones(m + 1, np.int64)
    indptr[0] = 0
    feats = bmc.data.Features(indptr, np.array([5]), np.array([1.0]), [str(j) for j in range(f)])
    assert feats.shape == (m, f)
    with pytest.raises(ValueError, match="the rows .*200000 x 200000"):
        macau.link_arrays(feats, jnp.float64)


def test_a_fit_on_the_rows_keeps_full_links_and_folds_in(monkeypatch):
    """Gibbs and VB with the rows' implicit feedback (12 rows, 30 columns) decomposed on
    the rows: the kept ``B_M`` has all F rows and its null part, fold-in reads it, and
    VB's reported ``B_M`` (the mean of ``q(B)``) lies in the row space of ``X``."""
    monkeypatch.setattr(eigen, "GRAM_MIN_FEATURES", 0)
    rng = np.random.default_rng(0)
    m1, m2 = 12, 30
    r, c = np.nonzero(rng.random((m1 + 3, m2)) < 0.3)
    values = rng.normal(size=r.size)
    train = bmc.RatingData(r[r < m1], c[r < m1], values[r < m1], shape=(m1, m2))
    new = bmc.RatingData(r[r >= m1] - m1, c[r >= m1], values[r >= m1], shape=(3, m2))
    prior = bmc.priors.NormalWishart(implicit="rows")
    assert "M/V" not in prior.gibbs_links(train, jnp.float64)
    kw = dict(K=K, prior=prior, seed=0, progress_bar=False)
    fit = bmc.fit(train, num_warmup=5, num_samples=5, thinning=1, num_chains=1, **kw)
    B = np.asarray(fit._factor_src["B_M"], np.float64).reshape(5, m2, K)
    X = bmc.data.implicit_features(train, "rows").to_dense()
    Vn = np.linalg.svd(X)[2][np.linalg.matrix_rank(X) :]  # a basis of X's null space
    assert np.min(np.abs(np.einsum("nf,sfk->snk", Vn, B))) > 0.0  # its null part was drawn
    folded = fit.fold_in(new)
    Xn = bmc.data.implicit_features(new, "rows").to_dense()
    assert np.abs(Xn @ Vn.T).max() > 0.1  # the new rows see B's null part
    mu, Lam, N = (np.asarray(fit._factor_src[k], np.float64) for k in ("mu_M", "Lambda_M", "N"))
    mu, Lam, N = mu.reshape(5, K), Lam.reshape(5, K, K), N.reshape(5, m2, K)
    tau, rows, cols = 1.0 / fit.noise_var(), np.asarray(new.rows), np.asarray(new.cols)
    y = np.asarray(new.values) - fit.info.shift.offset
    for s, u in np.ndindex(5, 3):  # each new row's Gaussian conditional per draw
        Nu, yu = N[s][cols[rows == u]], y[rows == u]
        rhs = Lam[s] @ (mu[s] + Xn[u] @ B[s]) + tau * Nu.T @ yu
        exact = np.linalg.solve(Lam[s] + tau * Nu.T @ Nu, rhs)
        np.testing.assert_allclose(folded.means[s, u], exact, rtol=1e-9, atol=1e-12)
    vb = bmc.fit(train, method="vb", max_iter=5, **kw)
    EB = np.asarray(vb.q_prior["B_M"], np.float64).reshape(m2, K)
    np.testing.assert_allclose(Vn @ EB, 0.0, atol=1e-10 * np.abs(EB).max())


def test_the_budget_is_a_containers_memory_limit(tmp_path, monkeypatch):
    machine = eigen.physical_memory()
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(eigen, "_CGROUP_LIMITS", (str(limit),))
    limit.write_text("max\n")
    assert eigen.physical_memory() == machine
    limit.write_text(f"{1 << 30}\n")
    assert eigen.physical_memory() == min(machine, 1 << 30)
    with pytest.raises(ValueError, match="0.5 GiB"):
        eigen.check_size(10677, 69878, True, "cols")
