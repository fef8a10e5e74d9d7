"""Feature-driven biases (``Biases(row_features=..., col_features=..., implicit=...)``;
docs/algorithms.md, "Biases"): the exact conditionals in float64 against the model's dense
log density, the per-row prior mean in the half sweep's bias draw, and the component's
checks.

Each conditional is checked the same way: for the model
``b ~ N(X w, s I_m)``, ``w ~ N(0, (s / lam) I_F)``, ``s ~ InvGamma(a, b)``,
``lam ~ Gamma(a_w, b_w)``, the log of the joint density minus the log density of the
conditional the code gives must be the same at every value of the variable (the
conditional is the joint up to a constant).  The draw of ``w`` is linear in its standard
normals, so its mean and covariance are read off exactly (value at 0, Jacobian).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo.offsets import bias_link
from bmczoo.inference import gibbs
from bmczoo.inference.gibbs.rows import Conditional, Side, SweepFlags, half_sweep
from bmczoo.linalg import csr_from_view

pytestmark = pytest.mark.usefixtures("x64")

RNG = np.random.default_rng(3)
M, F = 6, 8  # more features than rows: X^T X has a null space
X_DENSE = RNG.normal(size=(M, F)) * (RNG.random((M, F)) < 0.6)
X_DENSE[:, 0] = 1.0
A, B, A_W, B_W = 3.0, 2.0, 4.0, 1.5
EPS = np.finfo(np.float64).eps


def _link():
    feats = bmc.data.Features.from_dense(X_DENSE)
    return {k: v for k, v in bmc.priors.macau.link_arrays(feats, jnp.float64).items()}


def log_joint(b, w, s, lam):
    """``log p(b, w, s, lam)`` of the model, dense (scipy)."""
    return (
        stats.norm.logpdf(b, X_DENSE @ w, np.sqrt(s)).sum()
        + stats.norm.logpdf(w, 0.0, np.sqrt(s / lam)).sum()
        + stats.invgamma.logpdf(s, A, scale=B)
        + stats.gamma.logpdf(lam, A_W, scale=1.0 / B_W)
    )


def _assert_constant(diffs):
    diffs = np.asarray(diffs)
    scale = max(1.0, float(np.max(np.abs(diffs))))
    np.testing.assert_allclose(diffs - diffs[0], 0.0, atol=1e4 * EPS * scale)


def test_w_conditional_is_the_dense_gaussian():
    link = _link()
    b = RNG.normal(size=M)
    s, lam = 0.7, 1.9
    Gt = np.asarray(link["V"]).T @ (X_DENSE.T @ b)
    Gt[np.asarray(link["d"]) == 0.0] = 0.0  # coords_stats: zero on the null space

    def w_of(z):
        return jnp.asarray(link["V"]) @ bias_link.w_draw(link, s, lam, jnp.asarray(Gt), z)

    z0 = jnp.zeros(F)
    mean = np.asarray(w_of(z0))
    J = np.asarray(jax.jacfwd(w_of)(z0))
    Aw = X_DENSE.T @ X_DENSE + lam * np.eye(F)
    np.testing.assert_allclose(mean, np.linalg.solve(Aw, X_DENSE.T @ b), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(J @ J.T, s * np.linalg.inv(Aw), rtol=1e-9, atol=1e-12)
    # and the joint density over w is that Gaussian up to a constant
    cov = J @ J.T
    ws = mean + RNG.normal(size=(5, F))
    _assert_constant(
        [log_joint(b, w, s, lam) - stats.multivariate_normal.logpdf(w, mean, cov) for w in ws]
    )


def test_variance_conditional_is_the_dense_inverse_gamma():
    b, w, lam = RNG.normal(size=M), RNG.normal(size=F), 1.3
    resid = b - X_DENSE @ w
    shape, scale = bias_link.variance_conditional(jnp.sum(resid**2), jnp.asarray(w), lam, M, A, B)
    shape, scale = float(shape), float(scale)
    assert shape == A + 0.5 * (M + F)
    np.testing.assert_allclose(scale, B + 0.5 * (resid @ resid + lam * w @ w), rtol=1e-13)
    _assert_constant(
        [
            log_joint(b, w, s, lam) - stats.invgamma.logpdf(s, shape, scale=scale)
            for s in (0.2, 0.9, 2.5, 7.0)
        ]
    )


def test_lam_conditional_is_the_dense_gamma():
    b, w, s = RNG.normal(size=M), RNG.normal(size=F), 0.6
    shape, rate = bmc.priors.macau.lam_conditional(
        jnp.asarray(w)[:, None], jnp.full((1, 1), 1.0 / s), A_W, B_W
    )
    shape, rate = float(shape), float(rate)
    _assert_constant(
        [
            log_joint(b, w, s, lam) - stats.gamma.logpdf(lam, shape, scale=1.0 / rate)
            for lam in (0.1, 0.8, 3.0, 11.0)
        ]
    )


def test_half_sweep_bias_draw_uses_the_prior_mean():
    """One row side of a 6 x 4 problem: the bias draw is ``N((x_i^T w / s + tau r_i) / p,
    1 / p)`` with ``p = 1/s + tau n_i`` and ``r_i = sum_j (Y_ij - c_j - M_i . N_j)`` (row 5
    has no rating: ``N(x_5^T w, s)``)."""
    rng = np.random.default_rng(0)
    m, m2, K, tau, s = 6, 4, 2, 1.7, 0.45
    rows = np.array([0, 0, 1, 2, 2, 2, 3, 4])
    cols = np.array([0, 3, 1, 0, 1, 2, 3, 2])
    y = rng.normal(size=rows.size)
    data = bmc.RatingData(rows, cols, y, (m, m2))
    csr = csr_from_view(data.row_view, (m, m2), jnp.float64)
    own, other = rng.normal(size=(1, m, K)), rng.normal(size=(1, m2, K))
    c = rng.normal(size=(1, m2))
    prior_mean = rng.normal(size=(1, m))
    side = Side(csr, jnp.asarray(own), jnp.asarray(other), jnp.zeros((1, m)), jnp.asarray(c))
    cond = Conditional(
        (jnp.eye(K)[None], jnp.zeros((1, K))),
        jnp.full((1,), tau),
        jnp.full((1,), 1.0 / s),
        jnp.asarray(prior_mean),
    )
    flags = SweepFlags(rho=0.0, use_bias=True, sse=False)
    z = jnp.zeros((1, m, K))

    def bias(zb):
        return np.asarray(half_sweep(side, z, jnp.asarray(zb), cond, flags)[1])[0]

    n = np.bincount(rows, minlength=m)
    r = np.zeros(m)
    np.add.at(r, rows, y - c[0, cols] - np.sum(own[0, rows] * other[0, cols], -1))
    p = 1.0 / s + tau * n
    np.testing.assert_allclose(
        bias(np.zeros((1, m))), (prior_mean[0] / s + tau * r) / p, rtol=1e-12
    )
    np.testing.assert_allclose(
        bias(np.ones((1, m))) - bias(np.zeros((1, m))), 1.0 / np.sqrt(p), rtol=1e-12
    )


# --------------------------------------------------------------------------- the component
def test_biases_without_features_are_unchanged():
    b = bmc.offsets.Biases()
    assert b.linked_sides == ()
    assert b.describe() == {"name": "biases", "a": 1.0, "b": 1.0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(row_features="yes"), "Biases: row_features must be"),
        (dict(implicit="both"), "Biases: implicit must be"),
        (dict(a_w=0.0), "a_w"),
        (dict(b_w=-1.0), "b_w"),
    ],
)
def test_bad_specifications_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bmc.offsets.Biases(**kwargs)


def test_missing_data_features_name_the_biases():
    data = bmc.RatingData([0, 1], [1, 0], [1.0, 2.0], (2, 2))
    with pytest.raises(ValueError, match=r"Biases\(row_features=True\): the data has no"):
        gibbs.build_problem(data, 1.0, biases=bmc.offsets.Biases(row_features=True))
