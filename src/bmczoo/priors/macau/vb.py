"""Mean-field VB of the link: the optimal ``q(B)``, ``q(lam_B)`` and ``q(mu, Lambda)``, the
link's ELBO part, and :class:`VBLink`, the prior seen through the VB hooks."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._wishart import chol_inverse, expected_lambda, multidigamma, nw_vb_term
from .algebra import LinkHyper, LinkRows, b_mean, nw_with_link, residual_sums
from .arrays import coords_mean, coords_stats, links_of


# Mean-field VB of the link (one linked factor; the other factor's rows are the same with
# their own features).  q = prod_i q(M_i) q(mu, Lambda) q(B) q(lam_B) with
#
#   q(mu, Lambda) = NW(mu*, beta*, W*, nu*),  q(lam_B) = Gamma(alpha, rho),
#   q(B) = MN(Bbar, A^{-1}, U):  in the basis V of X^T X = V diag(d) V^T the rows of
#          Bt = V^T B are independent, Bt_f ~ N(Bt_bar_f, U / a_f).
#
# Stored per linked factor F in the prior's q-state (leading run axis C):
#   Bt_F (C, F, K) = V^T Bbar,  Ba_F (C, F) = a,  BU_F (C, K, K) = U,
#   lam_shape_F, lam_rate_F (C,) = alpha, rho.
#
# Expectations used below (E[Lambda] = nu* W*, E[Lambda mu] = E[Lambda] mu*,
# lam = E[lam_B] = alpha / rho, E[log lam_B] = psi(alpha) - log rho):
#   E[B^T B]           = Bt_bar^T Bt_bar + (sum_f 1/a_f) U
#   E[B^T X^T X B]     = Bt_bar^T diag(d) Bt_bar + (sum_f d_f/a_f) U
#   E[tr(Lambda B^T B)] = tr(E[Lambda] E[B^T B])


class LinkQ(NamedTuple):
    """``q(B)`` in the eigenbasis (one run): the mean ``Bt`` = ``V^T Bbar`` (F, K), ``a = d +
    E[lam_B]`` (F,) and the column covariance ``U`` (K, K)."""

    Bt: jax.Array
    a: jax.Array
    U: jax.Array


class NormalWishartQ(NamedTuple):
    """``q(mu, Lambda) = NW(mu*, beta*, W*, nu*)`` (one run), with ``Winv = W*^{-1}``."""

    mu: jax.Array
    beta: jax.Array
    nu: jax.Array
    Winv: jax.Array


class GammaQ(NamedTuple):
    """``q(lam_B) = Gamma(shape, rate)`` (one run)."""

    shape: jax.Array
    rate: jax.Array


def _vb_b_moments(link: dict, Bt, a, U):
    """``(E[B^T B], E[B^T X^T X B])`` (K, K) each of ``q(B)`` (one run)."""
    d = link["d"]
    EBB = Bt.T @ Bt + jnp.sum(1.0 / a) * U
    EBDB = Bt.T @ (d[:, None] * Bt) + jnp.sum(d / a) * U
    return EBB, EBDB


def vb_b_update(link: dict, mu, E_Lam, lam_mean, Gt):
    """The optimal ``q(B)`` given ``q(M)``, ``q(mu, Lambda)``, ``q(lam_B)`` (one run, one side).

    ``log q(B) = E[log p(M | mu, Lambda, B)] + E[log p(B | Lambda, lam_B)] + const`` is, with
    ``E[Lambda mu] = E[Lambda] mu*``,
    ``tr(E[Lambda] B^T X^T (E[M] - 1 mu*^T)) - tr(E[Lambda] B^T (X^T X + E[lam_B] I) B) / 2``:
    the matrix normal ``MN(A^{-1} X^T (E[M] - 1 mu*^T), A^{-1}, E[Lambda]^{-1})`` with
    ``A = X^T X + E[lam_B] I``.  In the basis ``V``: ``Bt_bar_f = (Gt_f - u_f mu*) / a_f``,
    ``a = d + E[lam_B]``, ``U = E[Lambda]^{-1}``.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    mu : jax.Array
        ``mu*`` (K,) of ``q(mu, Lambda)``.
    E_Lam : jax.Array
        ``E[Lambda] = nu* W*`` (K, K).
    lam_mean : jax.Array
        ``E[lam_B]`` (scalar).
    Gt : jax.Array
        ``V^T X^T E[M]`` (F, K).

    Returns
    -------
    LinkQ
        ``(Bt_bar, a, U)``: (F, K), (F,), (K, K).
    """
    Bt, a = b_mean(link, mu, lam_mean, Gt)
    U = jnp.linalg.inv(E_Lam)
    return LinkQ(Bt, a, 0.5 * (U + U.T))


def vb_lam_update(link: dict, Bt, a, U, E_Lam, a_B: float, b_B: float):
    """The optimal ``q(lam_B) = Gamma(a_B + F K / 2, b_B + tr(E[Lambda] E[B^T B]) / 2)`` given
    ``q(B)`` and ``q(mu, Lambda)`` (one run, one side).

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    Bt, a, U : jax.Array
        ``q(B)`` (:func:`vb_b_update`).
    E_Lam : jax.Array
        ``E[Lambda]`` (K, K).
    a_B, b_B : float
        The prior's shape and rate of ``lam_B``.

    Returns
    -------
    tuple of jax.Array
        Shape and rate (scalars).
    """
    F, K = Bt.shape
    EBB, _ = _vb_b_moments(link, Bt, a, U)
    return jnp.asarray(a_B + 0.5 * F * K, Bt.dtype), b_B + 0.5 * jnp.sum(E_Lam * EBB)


def vb_residual_stats(link: dict, qB: LinkQ, rows: LinkRows):
    """The expected sums of the residuals ``e_i = M_i - B^T x_i`` under ``q(M) q(B)``:
    ``sum_i E[e_i] = s1 - Bt_bar^T u`` and ``sum_i E[e_i e_i^T] = s2 - Bt_bar^T Gt - Gt^T
    Bt_bar + E[B^T X^T X B]`` (one run, one side).

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    qB : LinkQ
        ``q(B)`` (:func:`vb_b_update`).
    rows : LinkRows
        ``s1 = sum_i E[M_i]`` (K,), ``s2 = sum_i E[M_i M_i^T]`` (K, K) and ``Gt = V^T X^T
        E[M]`` (F, K).

    Returns
    -------
    tuple of jax.Array
        ``(s1e, s2e)``: (K,), (K, K).
    """
    Bt, a, U = qB
    s1, s2, Gt = rows
    _, EBDB = _vb_b_moments(link, Bt, a, U)
    s1e, s2e = residual_sums(link, Bt, s1, s2, Gt, EBDB)
    return s1e, 0.5 * (s2e + s2e.T)


def vb_nw_link_update(
    link: dict, qB: LinkQ, lam_mean, rows: LinkRows, m: int, beta0: float, nu0: float, W0_inv
):
    """The optimal ``q(mu, Lambda)`` given ``q(M)``, ``q(B)``, ``q(lam_B)`` (one run, one side):
    :func:`~bmczoo.priors.normal_wishart.nw_posterior` of the expected residual sums
    (:func:`vb_residual_stats`), then ``B``'s prior ``sum_f log N(B_f | 0, (lam_B
    Lambda)^{-1})`` adds ``F`` to the degrees of freedom and ``E[lam_B] E[B^T B]`` to the
    inverse scale.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    qB : LinkQ
        ``q(B)`` (:func:`vb_b_update`).
    lam_mean : jax.Array
        ``E[lam_B]``.
    rows : LinkRows
        The rows' expected statistics (see :func:`vb_residual_stats`).
    m : int
        Number of rows.
    beta0, nu0 : float
        The Normal-Wishart prior's ``beta0`` and ``nu0``.
    W0_inv : jax.Array
        ``W0^{-1}`` (K, K).

    Returns
    -------
    tuple
        ``(mu*, beta*, nu*, W*^{-1})``.
    """
    s1e, s2e = vb_residual_stats(link, qB, rows)
    EBB, _ = _vb_b_moments(link, *qB)
    return nw_with_link(s1e, s2e, EBB, lam_mean, qB.Bt.shape[0], m, beta0, nu0, W0_inv)


def vb_link_elbo_term(
    link: dict,
    q_nw: NormalWishartQ,
    qB: LinkQ,
    q_lam: GammaQ,
    rows: LinkRows,
    m: int,
    hyper: LinkHyper,
):
    """The ELBO part of one linked factor (one run): ``E[log p(M | mu, Lambda, B)] +
    E[log NW(mu, Lambda)] - E[log q(mu, Lambda)] + E[log p(B | Lambda, lam_B)] + E[log
    p(lam_B)] - E[log q(B)] - E[log q(lam_B)]``, at any stored q.

    The first three are :func:`~bmczoo.priors.normal_wishart.nw_vb_term` with the
    residuals' expected sums (:func:`vb_residual_stats`: the rows' term depends on ``q(M)
    q(B)`` only through them).  With ``E[log|Lambda|] = psi_K(nu/2) + K log 2 + log|W*|``
    and ``E[log lam_B] = psi(alpha) - log rho``:

    * ``E[log p(B)] = (F K / 2)(E[log lam_B] - log 2 pi) + (F / 2) E[log|Lambda|] -
      E[lam_B] tr(E[Lambda] E[B^T B]) / 2``;
    * ``E[log p(lam_B)] = a_B log b_B - log Gamma(a_B) + (a_B - 1) E[log lam_B] - b_B E[lam_B]``;
    * ``-E[log q(B)] = (F K / 2)(1 + log 2 pi) + (F log|U| - K sum_f log a_f) / 2``;
    * ``-E[log q(lam_B)] = alpha - log rho + log Gamma(alpha) + (1 - alpha) psi(alpha)``.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    q_nw : NormalWishartQ
        ``q(mu, Lambda) = NW(mu*, beta*, W*, nu*)``.
    qB : LinkQ
        ``q(B)`` (:func:`vb_b_update`).
    q_lam : GammaQ
        ``q(lam_B)``.
    rows : LinkRows
        The rows' expected statistics (see :func:`vb_residual_stats`).
    m : int
        Number of rows.
    hyper : LinkHyper
        The prior's hyper-parameters (``nu0`` resolved for ``K``).

    Returns
    -------
    jax.Array
        The scalar ELBO part.
    """
    from jax.scipy.special import digamma, gammaln

    mu, beta, nu, Winv = q_nw
    Bt, a, U = qB
    shape, rate = q_lam
    a_B, b_B = hyper.a_B, hyper.b_B
    F, K = Bt.shape
    dt = Bt.dtype
    log2pi = jnp.log(2.0 * jnp.pi).astype(dt)
    s1e, s2e = vb_residual_stats(link, qB, rows)
    out = nw_vb_term(mu, beta, nu, Winv, s1e, s2e, m, hyper.beta0, hyper.nu0, hyper.W0_scale)
    W, logdet_W = chol_inverse(Winv)
    ElogL = multidigamma(0.5 * nu, K) + K * jnp.log(2.0) + logdet_W
    lam, Eloglam = shape / rate, digamma(shape) - jnp.log(rate)
    EBB, _ = _vb_b_moments(link, Bt, a, U)
    log_pB = 0.5 * F * K * (Eloglam - log2pi) + 0.5 * F * ElogL - 0.5 * lam * jnp.sum(nu * W * EBB)
    log_plam = a_B * jnp.log(b_B) - gammaln(a_B) + (a_B - 1.0) * Eloglam - b_B * lam
    logdet_U = jnp.linalg.slogdet(U)[1]
    H_B = 0.5 * F * K * (1.0 + log2pi) + 0.5 * (F * logdet_U - K * jnp.sum(jnp.log(a)))
    H_lam = shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)
    return out + log_pB + log_plam + H_B + H_lam


def unlinked(prior):
    """``prior`` without its feature links (the same hyper-parameters)."""
    import dataclasses

    return dataclasses.replace(prior, row_features=None, col_features=None, implicit=False)


class VBLink:
    """A Normal-Wishart prior with feature links seen through the VB hooks of
    :mod:`bmczoo.inference.vb` (``vb_state``, ``vb_row_priors``, ``vb_factor_stats``,
    ``vb_step``, ``vb_elbo_term``, ``vb_params``), with the links' arrays
    (:meth:`~bmczoo.priors.NormalWishart.gibbs_links`) bound.  An unlinked factor keeps
    the plain Normal-Wishart updates; a linked one gets, in this order, the optimal
    :func:`vb_b_update`, :func:`vb_lam_update` and :func:`vb_nw_link_update` (each the
    exact optimum of its factor given the others: the ELBO never decreases), and its rows'
    prior means in the factor update are ``mu* + Bbar^T x_i``.

    Parameters
    ----------
    prior : NormalWishart
        The prior with its links.
    links : dict
        Its link arrays (``"M/X"``, ``"M/d"``, ... as built by ``gibbs_links``).
    """

    has_column_scales = False

    def __init__(self, prior, links: dict):
        self.prior, self.links = prior, links
        self.base = unlinked(prior)
        self.name = prior.name
        self.sides = {side: prior._side_link(links, side) for side in ("M", "N")}

    def _hyper(self, K: int) -> LinkHyper:
        return LinkHyper(
            beta0=self.prior.beta0,
            nu0=self.prior.degrees(K),
            W0_scale=self.prior.W0_scale,
            a_B=self.prior.a_B,
            b_B=self.prior.b_B,
        )

    def vb_state(self, K, m1, m2, C, dtype=jnp.float32, gamma=1.0):
        """The plain Normal-Wishart start, and for each linked factor ``q(B)`` at zero mean
        with ``a = d + 1``, ``U = I`` and ``q(lam_B)`` with mean 1 (only read by the first
        factor update through ``Bbar = 0``).

        Parameters
        ----------
        K, m1, m2, C : int
            Rank, the factors' row counts, number of runs.
        dtype : dtype
            Floating dtype.
        gamma : float
            Not used.

        Returns
        -------
        dict
            The q-state.
        """
        q = self.base.vb_state(K, m1, m2, C, dtype, gamma)
        for side, link in self.sides.items():
            if link is None:
                continue
            F = link["d"].shape[0]
            shape = self.prior.a_B + 0.5 * F * K
            q[f"Bt_{side}"] = jnp.zeros((C, F, K), dtype)
            q[f"Ba_{side}"] = jnp.broadcast_to(link["d"].astype(dtype) + 1.0, (C, F))
            q[f"BU_{side}"] = jnp.broadcast_to(jnp.eye(K, dtype=dtype), (C, K, K))
            q[f"lam_shape_{side}"] = jnp.full((C,), shape, dtype)
            q[f"lam_rate_{side}"] = jnp.full((C,), shape, dtype)
        return q

    def vb_row_priors(self, q):
        """``(E[Lambda], E[Lambda] (mu* + Bbar^T x_i))`` per factor; the shift is (C, m, K)
        for a linked factor, (C, K) otherwise.

        Parameters
        ----------
        q : dict
            The q-state.

        Returns
        -------
        tuple
            ``((P_M, shift_M), (P_N, shift_N))``.
        """
        out = []
        for side, link in self.sides.items():
            EL = expected_lambda(q[f"Winv_{side}"], q[f"nu_{side}"])
            mean = q[f"mu_{side}"]
            if link is not None:
                mean = mean[:, None, :] + coords_mean(link, q[f"Bt_{side}"])
                out.append((EL, jnp.einsum("ckl,cil->cik", EL, mean)))
            else:
                out.append((EL, jnp.einsum("ckl,cl->ck", EL, mean)))
        return tuple(out)

    def vb_side_stats(self, m, V, side: str):
        """``(sum_i m_i, sum_i V_i + m_i m_i^T)`` and, for a linked factor, ``V^T X^T m``
        (C, F, K).

        Parameters
        ----------
        m, V : jax.Array
            Means (C, rows, K) and covariances (C, rows, K, K) of the factor's q.
        side : str
            ``"M"`` or ``"N"``.

        Returns
        -------
        tuple of jax.Array
            The statistics.
        """
        stats = self.base.vb_factor_stats(m, V)
        link = self.sides[side]
        if link is None:
            return stats
        return stats + (coords_stats(link, m),)

    def vb_factor_stats(self, m, V):
        """The plain statistics (no side known; :meth:`vb_side_stats` is what the VB core
        uses).

        Parameters
        ----------
        m, V : jax.Array
            Means and covariances of a factor's q.

        Returns
        -------
        tuple of jax.Array
            ``(sum_i m_i, sum_i V_i + m_i m_i^T)``.
        """
        return self.base.vb_factor_stats(m, V)

    def _side_step(self, q: dict, side: str, stats, m: int, K: int, dtype):
        link = self.sides[side]
        h = self._hyper(K)
        W0_inv = jnp.eye(K, dtype=stats[0].dtype) / h.W0_scale

        def one(mu, nu, Winv, shape, rate, rows):
            EL = expected_lambda(Winv, nu)
            qB = vb_b_update(link, mu, EL, shape / rate, rows.Gt)
            shape, rate = vb_lam_update(link, *qB, EL, h.a_B, h.b_B)
            mu, beta, nu, Winv = vb_nw_link_update(
                link, qB, shape / rate, rows, m, h.beta0, h.nu0, W0_inv
            )
            return (
                mu,
                jnp.asarray(beta, mu.dtype),
                jnp.asarray(nu, mu.dtype),
                Winv,
                *qB,
                shape,
                rate,
            )

        res = jax.vmap(one)(
            q[f"mu_{side}"],
            q[f"nu_{side}"],
            q[f"Winv_{side}"],
            q[f"lam_shape_{side}"],
            q[f"lam_rate_{side}"],
            LinkRows(*stats),
        )
        names = ("mu", "beta", "nu", "Winv", "Bt", "Ba", "BU", "lam_shape", "lam_rate")
        return {f"{n}_{side}": v.astype(dtype) for n, v in zip(names, res)}

    def vb_step(self, stats_M, stats_N, m1, m2, dtype=None, q=None):
        """The prior's CAVI step: the plain Normal-Wishart update for an unlinked factor;
        for a linked one ``q(B)``, ``q(lam_B)``, then ``q(mu, Lambda)`` (they need the
        current ``q``).

        Parameters
        ----------
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (:meth:`vb_side_stats`).
        m1, m2 : int
            Row counts.
        dtype : dtype, optional
            Dtype of the new q (default: the statistics').
        q : dict
            The current q-state (required).

        Returns
        -------
        dict
            The new q-state.
        """
        if q is None:
            raise ValueError("VBLink.vb_step needs the current q-state (q=)")
        K = stats_M[0].shape[-1]
        dt = stats_M[0].dtype if dtype is None else dtype
        plain = self.base.vb_step(stats_M[:2], stats_N[:2], m1, m2, dt)
        out = dict(q)
        for side, stats, m in (("M", stats_M, m1), ("N", stats_N, m2)):
            if self.sides[side] is None:
                out.update({k: v for k, v in plain.items() if k.endswith(f"_{side}")})
            else:
                out.update(self._side_step(q, side, stats, m, K, dt))
        return out

    def vb_elbo_term(self, q, stats_M, stats_N, m1, m2):
        """The prior's ELBO part (C,): :func:`~bmczoo.priors.normal_wishart.nw_vb_term` for an
        unlinked factor, :func:`vb_link_elbo_term` for a linked one.

        Parameters
        ----------
        q : dict
            The q-state.
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (:meth:`vb_side_stats`).
        m1, m2 : int
            Row counts.

        Returns
        -------
        jax.Array
            (C,).
        """
        K = stats_M[0].shape[-1]
        h = self._hyper(K)
        total = 0.0
        for side, stats, m in (("M", stats_M, m1), ("N", stats_N, m2)):
            link = self.sides[side]
            q_nw = NormalWishartQ(*(q[f"{n}_{side}"] for n in ("mu", "beta", "nu", "Winv")))
            if link is None:
                total = total + nw_vb_term(*q_nw, stats[0], stats[1], m, h.beta0, h.nu0, h.W0_scale)
                continue
            qB = LinkQ(*(q[f"{n}_{side}"] for n in ("Bt", "Ba", "BU")))
            q_lam = GammaQ(q[f"lam_shape_{side}"], q[f"lam_rate_{side}"])
            total = total + jax.vmap(lambda *a: vb_link_elbo_term(link, *a, m, h))(
                q_nw, qB, q_lam, LinkRows(*stats)
            )
        return total

    def vb_params(self, q, stats_M, stats_N, m1, m2):
        """The Normal-Wishart q parameters (:meth:`~bmczoo.priors.NormalWishart.vb_params`)
        and, per linked factor, ``B_F`` (the mean of ``q(B)`` in the features' basis, (C, F,
        K); zero on the null space of ``X``, so :func:`links_of` gives it exactly with
        either decomposition), ``lam_B_shape_F``, ``lam_B_rate_F`` and ``E_lam_B_F``.

        Parameters
        ----------
        q : dict
            The q-state.
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (only their first two parts are read).
        m1, m2 : int
            Row counts.

        Returns
        -------
        dict
            The parameters.
        """
        out = self.base.vb_params(q, stats_M[:2], stats_N[:2], m1, m2)
        for side, link in self.sides.items():
            if link is not None:
                out[f"B_{side}"] = links_of(link, q[f"Bt_{side}"])
                out[f"lam_B_shape_{side}"] = q[f"lam_shape_{side}"]
                out[f"lam_B_rate_{side}"] = q[f"lam_rate_{side}"]
                out[f"E_lam_B_{side}"] = q[f"lam_shape_{side}"] / q[f"lam_rate_{side}"]
        return out
