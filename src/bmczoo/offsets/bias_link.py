"""Feature-driven bias means (docs/algorithms.md, "Biases"): the biases of a side with
features ``x_i`` are ``b_i ~ N(x_i^T w, s^2)``, ``w ~ N(0, (s^2 / lam_w) I_F)``,
``lam_w ~ Gamma(a_w, b_w)``.

This is the Macau link of :mod:`bmczoo.priors.macau` with ``K = 1`` and ``Lambda = 1 /
s^2``, so the arrays are :func:`~bmczoo.priors.macau.link_arrays`' (the eigenbasis ``X^T X
= V diag(d) V^T``, the state holds ``wt = V^T w``) and the draws of ``w`` and ``lam_w``
are :func:`~bmczoo.priors.macau.b_draw` and :func:`~bmczoo.priors.macau.lam_conditional`.
The :class:`~bmczoo.offsets.Biases` component calls the functions here; the Gibbs state
carries the link's variables in ``GibbsState.bias_link`` (``row_bias_wt`` (C, F),
``row_bias_lam`` (C,), and the same with ``col_``) and the problem its arrays in
``GibbsProblem.bias_links`` (``row/<name>``, ``col/<name>``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _rng
from ..priors import macau

__all__ = [
    "LABELS",
    "side_link",
    "gibbs_links",
    "link_state",
    "prior_means",
    "w_draw",
    "variance_conditional",
    "link_update",
]

#: the two sides: the label of the names, the axis of the data, the index in ``bias_var``
LABELS = (("row", "rows", 0), ("col", "cols", 1))


def side_link(links: dict, label: str) -> dict | None:
    """The arrays of one side (``label`` ``"row"`` or ``"col"``), or None without a link."""
    prefix = f"{label}/"
    link = {k[len(prefix) :]: v for k, v in links.items() if k.startswith(prefix)}
    return link or None


def gibbs_links(biases, ratings, dtype) -> dict:
    """The device arrays of the biases' feature links for the fitted data (empty without
    one): :func:`~bmczoo.priors.macau.link_arrays` of each linked side's table under
    ``row/<name>`` and ``col/<name>``."""
    out = {}
    for (label, axis, _), spec in zip(LABELS, (biases.row_features, biases.col_features)):
        X = macau.side_features(spec, biases.implicit, ratings, axis, owner="Biases")
        if X is None:
            continue
        if X.n_features == 0:
            raise ValueError(f"Biases: the {axis}' feature table has no features")
        out.update({f"{label}/{k}": v for k, v in macau.link_arrays(X, dtype).items()})
    return out


def link_state(links: dict, dtype) -> dict:
    """The start of a linked side: ``w = 0`` and ``lam_w = 1``."""
    out = {}
    for label, _, _ in LABELS:
        link = side_link(links, label)
        if link is not None:
            out[f"{label}_bias_wt"] = jnp.zeros(link["d"].shape, dtype)
            out[f"{label}_bias_lam"] = jnp.ones((), dtype)
    return out


def prior_means(state: dict, links: dict) -> tuple:
    """The prior means ``X w`` (C, m) of the row and of the column biases (None for a side
    without a link) from the state's ``wt`` (C, F)."""
    out = []
    for label, _, _ in LABELS:
        link = side_link(links, label)
        if link is None:
            out.append(None)
        else:
            out.append(macau.coords_mean(link, state[f"{label}_bias_wt"][..., None])[..., 0])
    return tuple(out)


def w_draw(link: dict, var, lam, Gt, z):
    """``wt = V^T w`` drawn from ``w | b, s^2, lam_w`` (one chain): in the eigenbasis the
    coordinates are independent, ``wt_f ~ N(Gt_f / (d_f + lam_w), s^2 / (d_f + lam_w))``
    with ``Gt = V^T X^T b`` (F,) and ``z`` (F,) standard normals (Macau's ``B`` draw with
    ``K = 1``, ``mu = 0``, ``Lambda = 1/s^2``)."""
    dt = Gt.dtype
    Lam = jnp.reshape(1.0 / var, (1, 1)).astype(dt)
    return macau.b_draw(link, jnp.zeros((1,), dt), Lam, lam, Gt[:, None], z[:, None])[:, 0]


def variance_conditional(resid_sq, wt, lam, m: int, a: float, b: float):
    """Shape and scale of ``s^2 | b, w, lam_w ~ InvGamma(a + (m + F)/2, b + (||b - X w||^2
    + lam_w ||w||^2) / 2)`` (``resid_sq = ||b - X w||^2``, ``||w|| = ||wt||``)."""
    F = wt.shape[-1]
    return a + 0.5 * (m + F), b + 0.5 * (resid_sq + lam * jnp.sum(wt * wt, axis=-1))


def _side_update(keys, link: dict, bias, var, lam, hyper):
    """The blocks of one linked side, all chains: ``w | b, s^2, lam_w``, then ``s^2 | b,
    w, lam_w``, then ``lam_w | w, s^2``; ``keys`` (C,), ``bias`` (C, m), ``var`` and
    ``lam`` (C,), ``hyper = (a, b, a_w, b_w)``.  Returns ``(wt, var, lam)``."""
    a, b, a_w, b_w = hyper
    C, m = bias.shape
    dt = bias.dtype
    F = link["d"].shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    Gt = macau.coords_stats(link, bias[..., None])[..., 0]
    z = jax.vmap(lambda k: jax.random.normal(k, (F,), dt))(split[:, 0])
    wt = jax.vmap(lambda v, lm, g, zz: w_draw(link, v, lm, g, zz))(var, lam, Gt, z)
    resid = bias - macau.coords_mean(link, wt[..., None])[..., 0]
    shape, scale = variance_conditional(jnp.sum(resid * resid, axis=-1), wt, lam, m, a, b)
    var = jax.vmap(lambda k, sc: _rng.inverse_gamma(k, shape, sc, dt))(split[:, 1], scale)

    def lam_draw(k, w, v):
        sh, rate = macau.lam_conditional(w[:, None], jnp.reshape(1.0 / v, (1, 1)), a_w, b_w)
        return _rng.gamma(k, jnp.asarray(sh, dt), dtype=dt) / rate

    lam = jax.vmap(lam_draw)(split[:, 2], wt, var)
    return wt, var, lam


def link_update(biases, keys, biases_now: tuple, bias_var, state: dict, links: dict):
    """The biases' variance blocks of a sweep with feature links, all chains: per side, a
    linked one's :func:`_side_update`, an unlinked one's ``s^2 | b`` draw
    (:meth:`~bmczoo.offsets.Biases.sample_variance`, with the key it has without links).

    ``keys`` (C,) the bias variances' keys, ``biases_now = (b, c)`` (C, m1), (C, m2),
    ``bias_var`` (C, 2), ``state`` the link's variables.  Returns ``(bias_var, state)``."""
    side_keys = jax.vmap(jax.random.split)(keys)  # (C, 2): the keys of the two sides
    hyper = (biases.a, biases.b, biases.a_w, biases.b_w)
    new_var, new_state = [], dict(state)
    for (label, _, i), bias in zip(LABELS, biases_now):
        link = side_link(links, label)
        if link is None:
            new_var.append(
                jax.vmap(lambda k, q, m=bias.shape[1]: biases.sample_variance(k, q, m))(
                    side_keys[:, i], jnp.sum(bias * bias, axis=-1)
                )
            )
            continue
        wt, var, lam = _side_update(
            side_keys[:, i], link, bias, bias_var[:, i], state[f"{label}_bias_lam"], hyper
        )
        new_var.append(var)
        new_state[f"{label}_bias_wt"], new_state[f"{label}_bias_lam"] = wt, lam
    return jnp.stack(new_var, axis=-1), new_state
