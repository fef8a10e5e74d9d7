"""The link's Gibbs blocks: ``B``, then ``lam_B``, then ``(mu, Lambda)``, each an exact
conditional draw (one chain, one side)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from typing import NamedTuple

from ... import _rng
from .._wishart import wishart_draw
from .algebra import LinkHyper, LinkRows, b_mean, nw_with_link, residual_sums


def b_draw(link: dict, mu, Lam, lam_B, Gt, Z):
    """``Bt = V^T B`` drawn from ``B | mu, Lambda, lam_B, M`` given standard normals ``Z``
    (F, K) (one chain, one side): ``Bt_f = (Gt_f - u_f mu) / a_f + (Z Lc^{-1})_f /
    sqrt(a_f)``, ``a = d + lam_B``, ``Lambda = Lc Lc^T`` (rows of ``Z Lc^{-1}`` have
    covariance ``Lambda^{-1}``); linear in ``Z``, so its mean and covariance are checked
    exactly against the dense formula."""
    mean, a = b_mean(link, mu, lam_B, Gt)
    Lc = lax.linalg.cholesky(Lam, symmetrize_input=False)
    # Z Lc^{-1} as a product with the K x K inverse: XLA's CPU triangular solve from the
    # right with F rows costs about 300 times the product at F = 1,700, K = 10
    Lc_inv = lax.linalg.triangular_solve(
        Lc, jnp.eye(Lam.shape[-1], dtype=Lam.dtype), left_side=True, lower=True
    )
    return mean + (Z @ Lc_inv) * lax.rsqrt(a)[:, None]


def lam_conditional(Bt, Lam, a_B: float, b_B: float):
    """Shape and rate of ``lam_B | B, Lambda``: ``a_B + F K / 2``, ``b_B + tr(B Lambda
    B^T) / 2`` (``tr(B Lambda B^T) = tr(Bt Lambda Bt^T)``, ``V`` orthogonal)."""
    F, K = Bt.shape
    return a_B + 0.5 * F * K, b_B + 0.5 * jnp.sum((Bt @ Lam) * Bt)


def nw_link_conditional(
    link: dict, Bt, lam_B, s1, s2, Gt, m: int, beta0: float, nu0: float, W0_inv
):
    """``(mu*, beta*, nu*, W*^{-1})`` of ``(mu, Lambda) | M, B, lam_B``: the Normal-Wishart
    update of :func:`~bmczoo.priors.normal_wishart.nw_posterior` with the residuals
    ``e_i = M_i - B^T x_i`` as data (``sum_i e_i = s1 - Bt^T u``, ``sum_i e_i e_i^T = s2 -
    Gt^T Bt - Bt^T Gt + Bt^T diag(d) Bt``), then ``F`` added to the degrees of freedom and
    ``lam_B B^T B = lam_B Bt^T Bt`` to the inverse scale (``B``'s prior)."""
    d = link["d"]
    s1e, s2e = residual_sums(link, Bt, s1, s2, Gt, Bt.T @ (d[:, None] * Bt))
    return nw_with_link(s1e, s2e, Bt.T @ Bt, lam_B, d.shape[0], m, beta0, nu0, W0_inv)


class LinkChain(NamedTuple):
    """A linked factor's prior state in one chain: ``mu`` (K,), ``Lambda`` (K, K) and
    ``lam_B`` (scalar)."""

    mu: jax.Array
    Lam: jax.Array
    lam_B: jax.Array


def link_block(key, link: dict, chain: LinkChain, rows: LinkRows, m: int, hyper: LinkHyper, W0_inv):
    """The link's blocks for one chain and one side, each an exact conditional draw:

    1. ``B | mu, Lambda, lam_B, M``: ``MN(A^{-1} X^T E, A^{-1}, Lambda^{-1})`` with ``A =
       X^T X + lam_B I``, ``E = M - 1 mu^T``.  In the basis ``V`` (``X^T X = V diag(d)
       V^T``) ``A`` is diagonal, so the rows of ``Bt = V^T B`` are independent:
       ``Bt_f ~ N((V^T X^T E)_f / (d_f + lam_B), Lambda^{-1} / (d_f + lam_B))``
       (:func:`b_draw`); ``B = V Bt``.  O(F^2 K) per draw, whatever ``lam_B``.
    2. ``lam_B | B, Lambda ~ Gamma(a_B + F K / 2, b_B + tr(B Lambda B^T) / 2)``
       (:func:`lam_conditional`).
    3. ``(mu, Lambda) | M, B, lam_B``: Normal-Wishart with the residuals ``M_i - B^T x_i``
       as data; ``B``'s prior adds ``F`` to the Wishart degrees of freedom and ``lam_B
       B^T B`` to the inverse scale (:func:`nw_link_conditional`).

    Parameters
    ----------
    key : jax.Array
        The chain's key of this block.
    link : dict
        The side's arrays (:func:`~bmczoo.priors.macau.link_arrays`).
    chain : LinkChain
        The current ``mu``, ``Lambda`` and ``lam_B``.
    rows : LinkRows
        The rows' sums ``s1 = sum_i M_i``, ``s2 = M^T M`` and ``Gt = V^T X^T M``
        (:meth:`~bmczoo.priors.NormalWishart.link_factor_stats`).
    m : int
        Number of rows.
    hyper : LinkHyper
        The prior's hyper-parameters (``W0_scale`` is read through ``W0_inv``).
    W0_inv : jax.Array
        ``W0^{-1}`` (K, K).

    Returns
    -------
    tuple of jax.Array
        ``(mu, Lambda, Bt, lam_B)``: the link in the eigenbasis (``B = V Bt``).
    """
    mu, Lam, lam_B = chain
    s1, s2, Gt = rows
    dt = mu.dtype
    F, K = Gt.shape
    kB, kl, kw = jax.random.split(key, 3)
    Bt = b_draw(link, mu, Lam, lam_B, Gt, _rng.normal(kB, (F, K), dt))
    shape, rate = lam_conditional(Bt, Lam, hyper.a_B, hyper.b_B)
    lam_B = _rng.gamma(kl, jnp.asarray(shape, dt), dtype=dt) / rate
    mu_star, beta_star, nu_star, Winv = nw_link_conditional(
        link, Bt, lam_B, s1, s2, Gt, m, hyper.beta0, hyper.nu0, W0_inv
    )
    mu_new, Lam_new = wishart_draw(kw, Winv, nu_star, beta_star, mu_star)
    return mu_new, Lam_new, Bt, lam_B
