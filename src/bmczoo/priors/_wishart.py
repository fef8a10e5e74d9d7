"""The Normal-Wishart algebra shared by the Normal-Wishart prior and its feature links
(:mod:`bmczoo.priors.normal_wishart`, :mod:`bmczoo.priors.macau`): the conjugate update of
``(mu, Lambda)``, the Wishart draw, and the expectations of its VB term."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .. import _rng

__all__ = [
    "nw_posterior",
    "nw_vb_term",
    "wishart_draw",
    "chol_inverse",
    "expected_lambda",
    "multidigamma",
]


def nw_posterior(s1: jax.Array, s2: jax.Array, m: int, beta0: float, nu0: float, W0_inv: jax.Array):
    """Normal-Wishart conditional of ``(mu, Lambda)`` given ``m`` rows through their sums
    ``s1 = sum_i x_i`` (K,) and ``s2 = sum_i x_i x_i^T`` (K, K), prior mean ``mu0 = 0``.

    Returns ``(mu_star, beta_star, nu_star, Winv_star)`` with
    ``Winv_star = W0^{-1} + S + (beta0 m / beta*) xbar xbar^T`` and ``S`` the scatter about
    the mean ``xbar``; algebraically ``Winv_star = W0^{-1} + s2 - s1 s1^T / beta*`` (the
    form used: no cancellation between ``s2`` and ``m xbar xbar^T`` beyond what the data
    has)."""
    beta_star = beta0 + m
    nu_star = nu0 + m
    mu_star = s1 / beta_star
    Winv = W0_inv + s2 - jnp.outer(s1, s1) / beta_star
    Winv = 0.5 * (Winv + Winv.T)
    return mu_star, beta_star, nu_star, Winv


def wishart_draw(key: jax.Array, Winv: jax.Array, nu, beta=None, mu=None):
    """``Lambda ~ Wishart(W, nu)`` given the *inverse* scale ``Winv = W^{-1}`` (Bartlett
    decomposition), and, with ``beta`` and ``mu``, ``mu' ~ N(mu, (beta Lambda)^{-1})``.

    With ``Winv = U U^T`` (Cholesky) and ``A`` lower triangular (``A_ii^2 ~ chi^2(nu - i)``,
    ``i = 0..K-1``, ``A_ij ~ N(0, 1)`` below the diagonal), ``X = U^{-T} A`` has
    ``X X^T ~ Wishart(U^{-T} U^{-1} = W, nu)``; ``Lambda^{-1} = U A^{-T} A^{-1} U^T``,
    so ``U A^{-T} z / sqrt(beta)`` has covariance ``(beta Lambda)^{-1}``.  Only
    triangular solves, no inverse.  Returns ``Lambda`` or ``(mu', Lambda)``.
    """
    K = Winv.shape[-1]
    dtype = Winv.dtype
    kc, kn, kz = jax.random.split(key, 3)
    shape = 0.5 * (nu - jnp.arange(K, dtype=dtype))
    diag = jnp.sqrt(2.0 * _rng.gamma(kc, shape, (K,), dtype=dtype))
    below = jnp.tril(_rng.normal(kn, (K, K), dtype), -1)
    A = below + jnp.diag(diag)
    U = lax.linalg.cholesky(Winv, symmetrize_input=False)
    X = lax.linalg.triangular_solve(U, A, left_side=True, lower=True, transpose_a=True)
    Lam = X @ X.T
    Lam = 0.5 * (Lam + Lam.T)
    if beta is None:
        return Lam
    z = _rng.normal(kz, (K,), dtype)
    v = lax.linalg.triangular_solve(A, z[:, None], left_side=True, lower=True, transpose_a=True)[
        :, 0
    ]
    return mu + (U @ v) / jnp.sqrt(beta), Lam


def chol_inverse(Winv):
    """``(W, log|W|)`` from the inverse scale ``Winv`` (..., K, K) by its Cholesky factor."""
    K = Winv.shape[-1]
    L = lax.linalg.cholesky(Winv, symmetrize_input=False)
    eye = jnp.broadcast_to(jnp.eye(K, dtype=Winv.dtype), Winv.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    W = jnp.swapaxes(Linv, -1, -2) @ Linv
    logdet_W = -2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return W, logdet_W


def expected_lambda(Winv, nu):
    """``E[Lambda] = nu W`` of ``Wishart(W, nu)`` given ``Winv`` (C, K, K), ``nu`` (C,)."""
    W, _ = chol_inverse(Winv)
    return nu[..., None, None] * W


def _multigammaln(a, K: int):
    """``log Gamma_K(a)`` (multivariate gamma function)."""
    j = jnp.arange(K, dtype=jnp.result_type(a))
    return 0.25 * K * (K - 1) * jnp.log(jnp.pi) + jnp.sum(
        jax.scipy.special.gammaln(a[..., None] - 0.5 * j), -1
    )


def multidigamma(a, K: int):
    """``sum_{j=0}^{K-1} digamma(a - j/2)``."""
    j = jnp.arange(K, dtype=jnp.result_type(a))
    return jnp.sum(jax.scipy.special.digamma(a[..., None] - 0.5 * j), -1)


def nw_vb_term(mu, beta, nu, Winv, s1, s2, m: int, beta0: float, nu0: float, W0_scale: float):
    """The Normal-Wishart prior's ELBO part for one factor with ``m`` rows, (C,):
    ``sum_i E[log N(F_i | mu, Lambda^{-1})] + E[log NW(mu, Lambda | 0, beta0, W0, nu0)]
    - E[log q(mu, Lambda)]`` for ``q = NW(mu, beta, W, nu)`` (``Winv = W^{-1}``), given
    the expected row moments ``s1 = sum_i E[F_i]``, ``s2 = sum_i E[F_i F_i^T]``.

    With ``E[log|Lambda|] = psi_K(nu/2) + K log 2 + log|W|``, ``E[Lambda] = nu W`` and
    ``E[(x - mu)^T Lambda (x - mu)] = K / beta + nu (x - mu*)^T W (x - mu*)``:

    * rows: ``(m/2) E log|Lambda| - (mK/2) log(2 pi) - (1/2) [mK/beta + nu tr(W Q)]``,
      ``Q = s2 - s1 mu^T - mu s1^T + m mu mu^T``;
    * prior: ``(K/2) log(beta0 / 2 pi) + (1/2) E log|Lambda| - (beta0/2) (K/beta +
      nu mu^T W mu) + log B(W0, nu0) + ((nu0 - K - 1)/2) E log|Lambda| - (1/2) tr(W0^{-1}
      nu W)``;
    * minus q: ``(K/2) log(beta / 2 pi) + (1/2) E log|Lambda| - K/2 + log B(W, nu) +
      ((nu - K - 1)/2) E log|Lambda| - nu K / 2``,

    where ``log B(W, nu) = -(nu/2) log|W| - (nu K/2) log 2 - log Gamma_K(nu/2)``.
    """
    K = mu.shape[-1]
    dt = mu.dtype
    W, logdet_W = chol_inverse(Winv)
    ElogL = multidigamma(0.5 * nu, K) + K * jnp.log(2.0) + logdet_W
    Q = (
        s2
        - s1[..., :, None] * mu[..., None, :]
        - mu[..., :, None] * s1[..., None, :]
        + m * mu[..., :, None] * mu[..., None, :]
    )
    trWQ = jnp.sum(W * Q, axis=(-2, -1))
    log2pi = jnp.log(2.0 * jnp.pi).astype(dt)
    rows = 0.5 * m * ElogL - 0.5 * m * K * log2pi - 0.5 * (m * K / beta + nu * trWQ)

    def log_B(logdet, n):
        return -0.5 * n * logdet - 0.5 * n * K * jnp.log(2.0) - _multigammaln(0.5 * n, K)

    muWmu = jnp.einsum("...k,...kl,...l->...", mu, W, mu)
    trW = jnp.trace(W, axis1=-2, axis2=-1)
    nu0_ = jnp.asarray(nu0, dt)
    prior = (
        0.5 * K * jnp.log(beta0 / (2.0 * jnp.pi))
        + 0.5 * ElogL
        - 0.5 * beta0 * (K / beta + nu * muWmu)
        + log_B(K * jnp.log(W0_scale), nu0_)
        + 0.5 * (nu0 - K - 1) * ElogL
        - 0.5 * nu * trW / W0_scale
    )
    neg_entropy = (
        0.5 * K * (jnp.log(beta) - log2pi)
        + 0.5 * ElogL
        - 0.5 * K
        + log_B(logdet_W, nu)
        + 0.5 * (nu - K - 1) * ElogL
        - 0.5 * nu * K
    )
    return rows + prior - neg_entropy
