"""The Normal-Wishart row prior's building blocks against closed forms (float64).

* :func:`wishart_draw`: ``N_DRAWS`` draws (one ``jax.vmap`` call) of ``Lambda ~ Wishart(W,
  nu)`` and ``mu | Lambda ~ N(mu0, (beta Lambda)^{-1})`` for a non-diagonal ``W``.  Checked:
  the mean ``nu W`` and the variances ``Var(Lambda_ij) = nu (W_ij^2 + W_ii W_jj)`` of the
  entries; the whitened mean ``z = sqrt(beta) L^T (mu - mu0)`` (``Lambda = L L^T``), which is
  exactly ``N(0, I)`` and independent of ``Lambda`` (``E[z] = 0``, ``E[z z^T] = I``); and
  the marginal of ``mu`` (a multivariate t): ``E[mu] = mu0``, ``Cov(mu) = W^{-1} / (beta
  (nu - K - 1))``.  Each statistic is turned into ``z = (estimate - exact) / MCSE`` with
  the MCSE from the exact variance where it is known in closed form (means of ``Lambda``,
  ``z``, ``z z^T``, ``mu``) and from the draws' fourth central moment otherwise (sample
  variances / covariances: ``se^2 = (m4 - s^4) / n``).  All must lie below the two-sided
  Bonferroni threshold at familywise level 1%.  Power: the same draws reject ``nu + 0.5``
  and an inverse-scale mix-up (``W`` <-> ``W^{-1}``).
* :func:`nw_posterior`: the textbook update ``W*^{-1} = W0^{-1} + S + (beta0 m / beta*)
  xbar xbar^T`` computed in numpy from the rows, against the library's sums-based form,
  within a float64 rounding bound (each entry a sum of ``m + 3`` terms: ``2 (m + 3) eps``
  times the sum of the absolute terms, for each of the two computations).
* ``NormalWishart.gibbs_update`` is exactly ``wishart_draw(nw_posterior(...))`` with
  ``W0^{-1} = I / W0_scale`` and ``nu0 = K`` by default.
* Hyper-parameter validation: clear ``ValueError``s.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.priors.normal_wishart import nw_posterior, wishart_draw

N_DRAWS = 200_000
FAMILYWISE_ALPHA = 0.01
EPS = np.finfo(np.float64).eps

K = 3
NU = 9.5  # marginal of mu: multivariate t with nu - K + 1 = 7.5 dof, finite 4th moments
BETA = 2.5
W = np.array([[1.0, 0.3, -0.2], [0.3, 0.5, 0.1], [-0.2, 0.1, 0.8]])
MU0 = np.array([0.5, -1.0, 2.0])
IU = np.triu_indices(K)  # the K (K + 1) / 2 distinct entries of a symmetric matrix


def _z_crit(n_stats: int) -> float:
    return NormalDist().inv_cdf(1.0 - FAMILYWISE_ALPHA / (2 * n_stats))


def _var_se(x):
    """Sample variance of the columns of ``x`` and its
    standard error ``sqrt((m4 - s^4) / n)`` (``m4`` the sample fourth central moment)."""
    d = x - x.mean(0)
    s2 = np.mean(d**2, 0) * x.shape[0] / (x.shape[0] - 1)
    m4 = np.mean(d**4, 0)
    return s2, np.sqrt(np.maximum(m4 - s2**2, 0.0) / x.shape[0])


@pytest.fixture(scope="module")
def draws():
    with jax.enable_x64(True):
        Winv = jnp.asarray(np.linalg.inv(W))
        keys = jax.random.split(jax.random.key(20240), N_DRAWS)
        mu, Lam = jax.jit(jax.vmap(lambda k: wishart_draw(k, Winv, NU, BETA, jnp.asarray(MU0))))(
            keys
        )
        assert mu.dtype == jnp.float64 and Lam.dtype == jnp.float64
        # same key, same draw (up to the rounding of jit/vmap's operation order, a few
        # eps for these K-term products); beta=None returns Lambda alone
        tol = dict(rtol=4 * K * EPS, atol=4 * K * EPS * float(jnp.max(jnp.abs(mu))))
        lam_only = wishart_draw(keys[7], Winv, NU)
        np.testing.assert_allclose(np.asarray(lam_only), np.asarray(Lam[7]), rtol=4 * K * EPS)
        mu2, Lam2 = wishart_draw(keys[7], Winv, NU, BETA, jnp.asarray(MU0))
        np.testing.assert_allclose(np.asarray(mu2), np.asarray(mu[7]), **tol)
        return np.asarray(mu), np.asarray(Lam)


def test_wishart_draw_moments(draws):
    mu, Lam = draws
    n = Lam.shape[0]
    assert np.all(np.isfinite(Lam)) and np.all(np.isfinite(mu))
    np.testing.assert_array_equal(Lam, np.swapaxes(Lam, 1, 2))  # exactly symmetric
    assert np.all(np.linalg.eigvalsh(Lam) > 0)
    z_all, labels = [], []

    # Lambda: mean nu W and Var(Lambda_ij) = nu (W_ij^2 + W_ii W_jj)
    L = Lam[:, IU[0], IU[1]]
    mean_ex = NU * W[IU]
    var_ex = NU * (W[IU] ** 2 + np.diag(W)[IU[0]] * np.diag(W)[IU[1]])
    z_all.append((L.mean(0) - mean_ex) / np.sqrt(var_ex / n))
    labels += [f"E[Lambda_{i}{j}]" for i, j in zip(*IU)]
    s2, se = _var_se(L)
    z_all.append((s2 - var_ex) / se)
    labels += [f"Var(Lambda_{i}{j})" for i, j in zip(*IU)]

    # whitened mean: z = sqrt(beta) L^T (mu - mu0) ~ N(0, I) exactly, for every Lambda
    chol = np.linalg.cholesky(Lam)
    z = np.sqrt(BETA) * np.einsum("nkl,nk->nl", chol, mu - MU0)
    z_all.append(z.mean(0) / np.sqrt(1.0 / n))
    labels += [f"E[z_{k}]" for k in range(K)]
    zz = z[:, IU[0]] * z[:, IU[1]]
    diag = IU[0] == IU[1]
    # E[z_i z_j] = delta_ij; Var(z_i^2) = 2, Var(z_i z_j) = 1 (i != j)
    z_all.append((zz.mean(0) - diag) / np.sqrt(np.where(diag, 2.0, 1.0) / n))
    labels += [f"E[z_{i} z_{j}]" for i, j in zip(*IU)]

    # marginal of mu: mean mu0, covariance W^{-1} / (beta (nu - K - 1))
    cov_ex = np.linalg.inv(W) / (BETA * (NU - K - 1))
    z_all.append((mu.mean(0) - MU0) / np.sqrt(np.diag(cov_ex) / n))
    labels += [f"E[mu_{k}]" for k in range(K)]
    d = mu - MU0
    prod = d[:, IU[0]] * d[:, IU[1]]  # about the exact mean: E[prod] = Cov exactly
    se = prod.std(0, ddof=1) / np.sqrt(n)
    z_all.append((prod.mean(0) - cov_ex[IU]) / se)
    labels += [f"Cov(mu_{i}, mu_{j})" for i, j in zip(*IU)]

    z_all = np.concatenate(z_all)
    zc = _z_crit(z_all.size)
    bad = {lab: round(float(v), 2) for lab, v in zip(labels, z_all) if abs(v) >= zc}
    assert not bad, f"wishart_draw disagrees with the closed form (z_crit {zc:.2f}): {bad}"

    # power: the same draws reject a wrong degree of freedom and an inverse-scale mix-up
    se_mean = np.sqrt(var_ex / n)
    assert np.max(np.abs((L.mean(0) - (NU + 0.5) * W[IU]) / se_mean)) > 2 * zc
    assert np.max(np.abs((L.mean(0) - NU * np.linalg.inv(W)[IU]) / se_mean)) > 2 * zc


# ----------------------------------------------------------------------------- nw_posterior
def _textbook(X, beta0, nu0, W0_inv):
    """Bishop (2006) eq. 2.155 / Murphy (2007) with prior mean 0, from the rows ``X``."""
    m = X.shape[0]
    xbar = X.mean(0)
    S = (X - xbar).T @ (X - xbar)
    beta = beta0 + m
    Winv = W0_inv + S + (beta0 * m / beta) * np.outer(xbar, xbar)
    return m * xbar / beta, beta, nu0 + m, Winv


@pytest.mark.parametrize("m, k, offset", [(50, 4, 3.0), (7, 2, -0.5), (1, 3, 1.0)])
def test_nw_posterior_equals_textbook_formula(x64, m, k, offset):
    rng = np.random.default_rng(m + k)
    X = offset + rng.normal(size=(m, k)) @ rng.normal(size=(k, k))
    A = rng.normal(size=(k, k))
    W0_inv = A @ A.T + 0.5 * np.eye(k)
    beta0, nu0 = 2.5, k + 1.5
    s1, s2 = bmc.priors.NormalWishart().factor_stats(jnp.asarray(X))
    mu, beta, nu, Winv = (
        np.asarray(v) for v in nw_posterior(s1, s2, m, beta0, nu0, jnp.asarray(W0_inv))
    )
    mu_t, beta_t, nu_t, Winv_t = _textbook(X, beta0, nu0, W0_inv)
    assert float(beta) == beta_t and float(nu) == nu_t
    assert Winv.dtype == np.float64
    np.testing.assert_array_equal(Winv, Winv.T)
    # rounding bound: each entry is a sum of m + 3 terms in either computation
    absX = np.abs(X)
    terms = np.abs(W0_inv) + absX.T @ absX + m * np.outer(np.abs(X).mean(0), np.abs(X).mean(0))
    bound = 2 * 2 * (m + 3) * EPS * terms
    err = np.abs(Winv - Winv_t)
    assert np.all(err <= bound), f"max err / bound {np.max(err / bound):.3g}"
    assert np.max(err) <= 1e-12 * np.max(np.abs(Winv_t))  # the rtol 1e-12
    np.testing.assert_allclose(mu, mu_t, rtol=0, atol=4 * (m + 1) * EPS * np.max(np.abs(X)))


def test_gibbs_update_is_wishart_draw_of_nw_posterior(x64):
    """The Gibbs block wires the pieces together: ``W0^{-1} = I / W0_scale``, ``nu0 = K``
    (default), each factor with its own half of the key; exact equality."""
    rng = np.random.default_rng(1)
    m1, m2, k = 9, 6, 3
    Mf, Nf = jnp.asarray(rng.normal(size=(m1, k))), jnp.asarray(rng.normal(size=(m2, k)))
    for prior in (
        bmc.priors.NormalWishart(beta0=3.0, W0_scale=0.4),
        bmc.priors.NormalWishart(nu0=5.5),
    ):
        key = jax.random.key(5)
        out = prior.gibbs_update(key, prior.factor_stats(Mf), prior.factor_stats(Nf), m1, m2)
        nu0 = float(k) if prior.nu0 is None else prior.nu0
        W0_inv = jnp.eye(k) / prior.W0_scale
        for side, F, m, kk in zip("MN", (Mf, Nf), (m1, m2), jax.random.split(key)):
            mu_s, beta_s, nu_s, Winv = nw_posterior(
                *prior.factor_stats(F), m, prior.beta0, nu0, W0_inv
            )
            mu, Lam = wishart_draw(kk, Winv, nu_s, beta_s, mu_s)
            np.testing.assert_array_equal(np.asarray(out[f"mu_{side}"]), np.asarray(mu))
            np.testing.assert_array_equal(np.asarray(out[f"Lambda_{side}"]), np.asarray(Lam))


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beta0=0.0), "beta0 must be finite and > 0"),
        (dict(beta0=-1.0), "beta0 must be finite and > 0"),
        (dict(beta0=float("nan")), "beta0 must be finite and > 0"),
        (dict(beta0=float("inf")), "beta0 must be finite and > 0"),
        (dict(beta0="2"), "beta0 must be a real number"),
        (dict(W0_scale=0.0), "W0_scale must be finite and > 0"),
        (dict(W0_scale=-2.0), "W0_scale must be finite and > 0"),
        (dict(W0_scale=float("nan")), "W0_scale must be finite and > 0"),
        (dict(nu0=0.0), "nu0 must be finite and > K - 1"),
        (dict(nu0=-1.0), "nu0 must be finite and > K - 1"),
        (dict(nu0=float("inf")), "nu0 must be finite and > K - 1"),
        (dict(nu0=float("nan")), "nu0 must be finite and > K - 1"),
        (dict(nu0=True), "nu0 must be a real number"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bmc.priors.NormalWishart(**kwargs)


def test_degrees_checks_nu0_against_K():
    assert bmc.priors.NormalWishart().degrees(4) == 4.0
    assert bmc.priors.NormalWishart(nu0=2.5).degrees(3) == 2.5  # > K - 1: a valid Wishart
    for nu0 in (2.0, 1.5):
        with pytest.raises(ValueError, match=r"nu0=.* must be > K - 1 = 2 for K=3"):
            bmc.priors.NormalWishart(nu0=nu0).degrees(3)


@pytest.mark.parametrize(
    "method, kw",
    [
        ("gibbs", dict(num_warmup=1, num_samples=2, thinning=1)),
        ("vb", dict(max_iter=2)),
        ("nuts", dict(num_warmup=2, num_samples=2, thinning=1)),
        ("map", dict(num_steps=2)),
    ],
)
def test_nu0_at_most_K_minus_1_is_refused_at_fit_time(method, kw):
    """nu0 = 2 is a valid prior for K <= 2 but not for K = 3 (nu0 must exceed K - 1)."""
    train = bmc.datasets.simulate_paper(12, seed=0).train
    prior = bmc.priors.NormalWishart(nu0=2.0)
    with pytest.raises(ValueError, match=r"NormalWishart: nu0=2 must be > K - 1 = 2 for K=3"):
        bmc.fit(train, K=3, prior=prior, method=method, progress_bar=False, **kw)
