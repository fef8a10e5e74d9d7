"""Mean-field VB of the feature-driven biases (docs/algorithms.md, "Biases"):
``q(b_i) = N``, ``q(w) = N`` diagonal in the eigenbasis of ``X^T X`` (coordinates ``wt =
V^T w``), ``q(lam_w) = Gamma``, ``q(s^2) = InvGamma`` per linked side.

The q-state adds, per linked side (``b`` the rows, ``c`` the columns, as the plain biases'
``b_mean``, ``sb_shape``): ``bw_mean``, ``bw_var`` (C, F) the means and variances of
``wt``, and ``blam_shape``, ``blam_rate`` (C,) of ``q(lam_w)``.  The updates, in this
order after the biases' (each the exact optimum of its factor given the others, so the
ELBO never decreases), with ``E[1/s] = alpha / beta`` and ``E[lam] = shape / rate``:

* ``q(b_i)``: precision ``E[1/s] + tau n_i``, mean ``(E[1/s] x_i^T E[w] + tau r_i) / p_i``;
* ``q(w)``: ``wt_f ~ N(Gt_f / a_f, 1 / (E[1/s] a_f))`` with ``a = d + E[lam]`` and ``Gt =
  V^T X^T E[b]``;
* ``q(lam_w) = Gamma(a_w + F/2, b_w + E[1/s] E||w||^2 / 2)``;
* ``q(s^2) = InvGamma(a + (m + F)/2, b + (E||b - X w||^2 + E[lam] E||w||^2) / 2)`` with
  ``E||b - X w||^2 = sum_i E[b_i^2] - 2 Gt . E[wt] + sum_f d_f E[wt_f^2]``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln

from .bias_link import LABELS, side_link
from ..priors import macau

__all__ = ["VBBiasLink", "vb_biases", "w_update", "lam_update", "variance_update"]

#: the q-state's letter of each side (``b_mean`` of the rows, ``c_mean`` of the columns)
LETTERS = {"row": "b", "col": "c"}


def w_update(link: dict, b_mean, Einv, Elam):
    """``q(w)``: means and variances (C, F) of ``wt`` given ``E[b]`` (C, m), ``E[1/s]`` and
    ``E[lam]`` (C,)."""
    Gt = macau.coords_stats(link, b_mean[..., None])[..., 0]
    a = link["d"][None, :] + Elam[:, None]
    return Gt / a, 1.0 / (Einv[:, None] * a)


def lam_update(a_w: float, b_w: float, w_sq, Einv):
    """``q(lam_w) = Gamma(a_w + F/2, b_w + E[1/s] E||w||^2 / 2)``: ``(shape, rate)`` given
    ``w_sq = (F, E||w||^2 (C,))``."""
    F, Ew2 = w_sq
    return jnp.full_like(Ew2, a_w + 0.5 * F), b_w + 0.5 * Einv * Ew2


def expected_resid_sq(link: dict, b_mean, b_sq, w_mean, w_var):
    """``E||b - X w||^2`` (C,) under ``q(b) q(w)`` (``b_sq = sum_i E[b_i^2]``)."""
    Gt = macau.coords_stats(link, b_mean[..., None])[..., 0]
    d = link["d"][None, :]
    return b_sq - 2.0 * jnp.sum(Gt * w_mean, -1) + jnp.sum(d * (w_mean**2 + w_var), -1)


def variance_update(a: float, b: float, m: int, resid_sq, w_sq, Elam):
    """``q(s^2) = InvGamma(a + (m + F)/2, b + (E||b - X w||^2 + E[lam] E||w||^2) / 2)``:
    ``(shape, rate)``."""
    F, Ew2 = w_sq
    return jnp.full_like(Ew2, a + 0.5 * (m + F)), b + 0.5 * (resid_sq + Elam * Ew2)


class VBBiasLink:
    """A :class:`~bmczoo.offsets.Biases` with features seen through the VB hooks of
    :mod:`bmczoo.inference.vb` (``vb_state``, ``vb_prior_means``, ``vb_bias_update``,
    ``vb_variances``, ``vb_elbo_term``), with the links' arrays bound; an unlinked side
    keeps the plain updates.

    Parameters
    ----------
    biases : bmczoo.offsets.Biases
        The component with its features.
    links : dict
        Its link arrays (:meth:`~bmczoo.offsets.Biases.gibbs_links`).
    """

    def __init__(self, biases, links: dict):
        self.biases, self.links = biases, links
        self.name = biases.name
        self.VB_ROW_KEYS = biases.VB_ROW_KEYS
        self.vb_bias_update = biases.vb_bias_update
        self.sides = {LETTERS[label]: side_link(links, label) for label, _, _ in LABELS}

    def vb_state(self, m1: int, m2: int, C: int, dtype) -> dict:
        """The plain start, and per linked side ``E[w] = 0`` (variances at their update
        with ``E[1/s] = E[lam] = 1``) and ``q(lam_w) = Gamma(a_w, a_w)`` (mean 1)."""
        q = self.biases.vb_state(m1, m2, C, dtype)
        a_w = self.biases.a_w
        for s, link in self.sides.items():
            if link is not None:
                F = link["d"].shape[0]
                q[f"{s}w_mean"] = jnp.zeros((C, F), dtype)
                q[f"{s}w_var"] = jnp.broadcast_to(1.0 / (link["d"] + 1.0), (C, F)).astype(dtype)
                q[f"{s}lam_shape"] = jnp.full((C,), a_w, dtype)
                q[f"{s}lam_rate"] = jnp.full((C,), a_w, dtype)
        return q

    def vb_prior_means(self, q: dict) -> tuple:
        """``X E[w]`` (C, m) of each linked side (None for another)."""
        return tuple(
            None if link is None else macau.coords_mean(link, q[f"{s}w_mean"][..., None])[..., 0]
            for s, link in self.sides.items()
        )

    def vb_variances(self, q: dict, sums: dict, dims) -> dict:
        """The link's updates of each linked side in order (``q(w)``, ``q(lam_w)``,
        ``q(s^2)``), the plain ``q(s^2)`` of another; ``sums`` as
        :meth:`~bmczoo.offsets.Biases.vb_elbo_term`'s."""
        bz = self.biases
        out = {}
        for (s, link), m in zip(self.sides.items(), dims):
            if link is None:
                out[f"s{s}_shape"], out[f"s{s}_rate"] = bz.vb_variance_update(sums[f"{s}_sq"], m)
                continue
            Einv = q[f"s{s}_shape"] / q[f"s{s}_rate"]
            Elam = q[f"{s}lam_shape"] / q[f"{s}lam_rate"]
            w_mean, w_var = w_update(link, q[f"{s}_mean"], Einv, Elam)
            w_sq = (w_mean.shape[-1], jnp.sum(w_mean**2 + w_var, -1))
            lam_shape, lam_rate = lam_update(bz.a_w, bz.b_w, w_sq, Einv)
            Elam = lam_shape / lam_rate
            resid = expected_resid_sq(link, q[f"{s}_mean"], sums[f"{s}_sq"], w_mean, w_var)
            out[f"s{s}_shape"], out[f"s{s}_rate"] = variance_update(
                bz.a, bz.b, m, resid, w_sq, Elam
            )
            out.update(
                {
                    f"{s}w_mean": w_mean,
                    f"{s}w_var": w_var,
                    f"{s}lam_shape": lam_shape,
                    f"{s}lam_rate": lam_rate,
                }
            )
        return out

    def vb_elbo_term(self, q: dict, m1: int, m2: int, sums: dict):
        """The biases' ELBO part (C,): the plain one for an unlinked side; for a linked side
        ``E[log p(b | w, s)] + E[log p(w | s, lam)] + E[log p(s)] + E[log p(lam)] - E[log
        q(s)] - E[log q(lam)] + H[q(b)] + H[q(w)]`` (the ``log 2 pi`` cancel):
        ``(m + F)/2 - ((m + F)/2) E[log s] + (F/2) E[log lam] - E[1/s] (E||b - X w||^2 +
        E[lam] E||w||^2) / 2 + (sum log Var b + sum log Var wt) / 2`` plus the inverse-gamma
        and gamma terms."""
        bz = self.biases
        total = 0.0
        plain = bz.vb_elbo_term(q, m1, m2, sums)  # both sides, plain
        for (s, link), m in zip(self.sides.items(), (m1, m2)):
            if link is None:
                continue
            al, be = q[f"s{s}_shape"], q[f"s{s}_rate"]
            Einv, Elog = al / be, jnp.log(be) - digamma(al)
            plain = plain - (
                0.5 * m - 0.5 * m * Elog - 0.5 * Einv * sums[f"{s}_sq"] + 0.5 * sums[f"{s}_logvar"]
            )  # the plain side's Gaussian terms, replaced here
            ls, lr = q[f"{s}lam_shape"], q[f"{s}lam_rate"]
            Elam, Eloglam = ls / lr, digamma(ls) - jnp.log(lr)
            w_mean, w_var = q[f"{s}w_mean"], q[f"{s}w_var"]
            F = w_mean.shape[-1]
            Ew2 = jnp.sum(w_mean**2 + w_var, -1)
            resid = expected_resid_sq(link, q[f"{s}_mean"], sums[f"{s}_sq"], w_mean, w_var)
            gauss = (
                0.5 * (m + F) * (1.0 - Elog)
                + 0.5 * F * Eloglam
                - 0.5 * Einv * (resid + Elam * Ew2)
                + 0.5 * (sums[f"{s}_logvar"] + jnp.sum(jnp.log(w_var), -1))
            )
            log_p = (
                bz.a_w * math.log(bz.b_w)
                - math.lgamma(bz.a_w)
                + (bz.a_w - 1.0) * Eloglam
                - bz.b_w * Elam
            )
            log_q = ls * jnp.log(lr) - gammaln(ls) + (ls - 1.0) * Eloglam - lr * Elam
            total = total + gauss + log_p - log_q
        return plain + total


def vb_biases(biases, links: dict | None):
    """The biases as the VB core sees them: ``biases`` itself (None, no links, or already
    bound), or a :class:`VBBiasLink` binding the link arrays."""
    if biases is None or not links or isinstance(biases, VBBiasLink):
        return biases
    return VBBiasLink(biases, links)
