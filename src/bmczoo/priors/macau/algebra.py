"""The algebra the link's Gibbs blocks and VB updates share: ``B``'s conditional mean, the
residuals' sums and the Normal-Wishart update with ``B``'s prior."""

from __future__ import annotations

from typing import NamedTuple

import jax

from .._wishart import nw_posterior


class LinkRows(NamedTuple):
    """The statistics of a linked factor's rows that the link's updates read (one chain or
    run): ``s1 = sum_i M_i`` (K,), ``s2 = sum_i M_i M_i^T`` (K, K) and ``Gt = V^T X^T M``
    (F, K) (VB: their expectations under ``q(M)``;
    :meth:`~bmczoo.priors.NormalWishart.link_factor_stats`)."""

    s1: jax.Array
    s2: jax.Array
    Gt: jax.Array


class LinkHyper(NamedTuple):
    """The hyper-parameters of a linked factor's prior: the Normal-Wishart prior's
    ``beta0``, ``nu0`` (resolved for ``K``) and ``W0_scale``, and the shape ``a_B`` and rate
    ``b_B`` of ``lam_B``'s Gamma prior."""

    beta0: float
    nu0: float
    W0_scale: float
    a_B: float
    b_B: float


def b_mean(link: dict, mu, lam, Gt):
    """``(Bt_bar, a)``: the mean ``(Gt_f - u_f mu) / a_f`` (F, K) of ``Bt`` given the rows
    and ``a = d + lam`` (F,) (Gibbs: the drawn ``lam_B``; VB: ``E[lam_B]``, ``E[mu] = mu*``)."""
    a = link["d"] + lam
    return (Gt - link["u"][:, None] * mu[None, :]) / a[:, None], a


def residual_sums(link: dict, Bt, s1, s2, Gt, BDB):
    """``sum_i e_i = s1 - Bt^T u`` and ``sum_i e_i e_i^T = s2 - Bt^T Gt - Gt^T Bt + BDB``
    of the residuals ``e_i = M_i - B^T x_i``, ``BDB`` the (expected) ``B^T X^T X B``."""
    BtG = Bt.T @ Gt
    return s1 - Bt.T @ link["u"], s2 - BtG - BtG.T + BDB


def nw_with_link(s1e, s2e, BB, lam, F: int, m: int, beta0: float, nu0: float, W0_inv):
    """:func:`~bmczoo.priors.normal_wishart.nw_posterior` of the residual sums, then
    ``B``'s prior: ``F`` added to the degrees of freedom and ``lam (B^T B)`` to the inverse
    scale (Gibbs: the draws; VB: ``E[lam_B] E[B^T B]``)."""
    mu_star, beta_star, nu_star, Winv = nw_posterior(s1e, s2e, m, beta0, nu0, W0_inv)
    Winv = Winv + lam * BB
    return mu_star, beta_star, nu_star + F, 0.5 * (Winv + Winv.T)
