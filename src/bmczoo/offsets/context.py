"""The context offset: per-rating covariates with Gaussian weights, grouped precisions.

``s_k = sum_f x_kf w_f`` for the per-rating feature table ``x`` of
:attr:`bmczoo.data.RatingData.context` (time bins, item x time bin, user x day, the
drift ``dev_u(t)``: :func:`bmczoo.data.time_features`), with ``w_f ~ N(0, 1/lam_g)`` for
the features of group ``g`` and ``lam_g ~ Gamma(a, b)`` (myFM's grouped hyper-priors).
Each group has at most one non-zero per rating (a one-hot group, or one number such as
``dev_u(t)`` in the column of the rating's user), so given the other groups a group's
weights are independent normals: the Gibbs block draws the groups one after the other,
each with a diagonal precision built by segment sums over the ratings (never a dense
``n x F`` matrix).  VB takes ``q(w_f) = N`` per feature and ``q(lam_g) = Gamma``: the same
segment sums give each group's exact coordinate update.  docs/algorithms.md, "Context
offset", derives the conditionals and the VB updates.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jax.scipy.special import digamma, gammaln

from .. import _rng
from ..data import Features, RatingData
from .base import Offset

__all__ = ["Context"]


def _feature_sums(precision, val, r, idx, F: int):
    """Per-feature sums over one group's ratings (a rating has at most one feature of
    the group): ``sum p_k x_k^2`` and ``sum p_k x_k r_k``, (C, F) each, both in one pass
    ((n, C, 2) -> (F, C, 2)); the Gibbs block and the VB update read them alike."""
    px = precision * val
    both = jax.ops.segment_sum(jnp.stack([px * val, px * r], -1).swapaxes(0, 1), idx, F)
    return both[..., 0].T, both[..., 1].T


@dataclasses.dataclass(frozen=True)
class Context(Offset):
    """Per-rating covariates ``sum_f x_kf w_f`` with a precision per feature group.

    Parameters
    ----------
    groups : tuple of str, optional
        The groups of :attr:`bmczoo.data.RatingData.context` the offset uses (default:
        all of them, in the order of the table).
    a, b : float
        Shape and rate of the gamma prior on each group's precision ``lam_g``.
    columns : str, optional
        Keyword only: the training table's columns (``Offset.bind``).
    """

    name: ClassVar[str] = "context"

    groups: tuple[str, ...] | None = None
    a: float = 1.0
    b: float = 1.0

    def __post_init__(self):
        for k in ("a", "b"):
            v = getattr(self, k)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not (math.isfinite(v) and v > 0)
            ):
                raise ValueError(f"Context: {k} must be a positive finite number, got {v!r}")
        if self.groups is not None:
            groups = (self.groups,) if isinstance(self.groups, str) else tuple(self.groups)
            if not groups or any(not isinstance(g, str) for g in groups):
                raise ValueError(
                    f"Context: groups must be names of feature groups, got {self.groups!r}"
                )
            object.__setattr__(self, "groups", groups)

    # ------------------------------------------------------------------ data
    def layout(self, context: Features | None) -> tuple[tuple[str, ...], np.ndarray]:
        """The groups used and, for each feature of the context table, its group's index
        (-1: a feature of a group not used).

        Parameters
        ----------
        context : Features or None
            A per-rating table (:attr:`bmczoo.data.RatingData.context`).
        """
        ctx = context
        if ctx is None:
            raise ValueError(
                "the context offset needs per-rating features: give the data a context table "
                "(RatingData(..., context=...), data.with_context(...) or "
                "bmczoo.data.time_features)"
            )
        present = tuple(dict.fromkeys(ctx.groups))
        groups = present if self.groups is None else self.groups
        missing = [g for g in groups if g not in present]
        if missing:
            raise ValueError(
                f"Context: the context table has no group {missing[0]!r}; its groups are "
                f"{', '.join(present)}"
            )
        where = {g: i for i, g in enumerate(groups)}
        return groups, np.array([where.get(g, -1) for g in ctx.groups], np.int32)

    def arrays(self, context: Features | None, n: int, dtype) -> dict:
        """``idx`` (G, n): each rating's feature in each group (its index among the used
        features), ``val`` (G, n): its value (0 where the rating has none), and ``group``
        (F,): each used feature's group.

        Parameters
        ----------
        context : Features or None
            The ``n`` ratings' per-rating table.
        n : int
            The number of ratings.
        dtype : dtype
            The float dtype of the run.
        """
        groups, of = self.layout(context)
        self.check_columns(context)
        used = np.flatnonzero(of >= 0)
        column = np.full(of.size, -1, np.int64)
        column[used] = np.arange(used.size)
        table = context
        G = len(groups)
        if table.n_rows != n:
            raise ValueError(f"Context: the table has {table.n_rows} rows for {n} ratings")
        rows = table.row_ids().astype(np.int64)
        cols = table.indices.astype(np.int64)
        g = of[cols]
        keep = g >= 0
        rows, cols, g, vals = rows[keep], cols[keep], g[keep], table.values[keep]
        slot = g.astype(np.int64) * max(n, 1) + rows
        if np.unique(slot).size != slot.size:
            k = int(np.flatnonzero(np.bincount(slot) > 1)[0])
            raise ValueError(
                f"Context: rating {k % max(n, 1)} of the table has more than one "
                f"feature of group {groups[k // max(n, 1)]!r}; each group must have at most one "
                "non-zero per rating"
            )
        idx = np.zeros((G, n), np.int32)
        val = np.zeros((G, n), np.float64)
        idx[g, rows], val[g, rows] = column[cols], vals
        return {
            "idx": jnp.asarray(idx),
            "val": jnp.asarray(val, dtype),
            "group": jnp.asarray(of[used]),
        }

    # ------------------------------------------------------------------ NumPyro
    def sample(self, ratings: RatingData) -> jax.Array:
        """``context_lam`` (G,) ``~ Gamma(a, b)``, ``context_w`` (F,) ``~ N(0, 1 /
        context_lam[group])`` and the offset (n,) at the ratings.

        Parameters
        ----------
        ratings : RatingData
            The ratings with their ``context`` table.
        """
        import numpyro
        import numpyro.distributions as dist

        arrays = self.arrays(ratings.context, ratings.n, jnp.result_type(float))
        G = arrays["idx"].shape[0]
        lam = numpyro.sample(f"{self.name}_lam", dist.Gamma(self.a, self.b).expand([G]).to_event(1))
        sd = 1.0 / jnp.sqrt(lam[arrays["group"]])
        w = numpyro.sample(f"{self.name}_w", dist.Normal(0.0, sd).to_event(1))
        return self.shift({"w": w[None]}, arrays)[0]

    # ------------------------------------------------------------------ Gibbs
    def gibbs_state(self, arrays: dict, C: int, dtype) -> dict:
        """``w`` (C, F) at zero and ``lam`` (C, G) at the prior mean ``a / b``.

        Parameters
        ----------
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        C : int
            The number of chains.
        dtype : dtype
            The float dtype of the run.
        """
        G, F = arrays["idx"].shape[0], arrays["group"].shape[0]
        return {
            "w": jnp.zeros((C, F), dtype),
            "lam": jnp.full((C, G), self.a / self.b, dtype),
        }

    def shift(self, state: dict, arrays: dict) -> jax.Array:
        """``sum_g w[idx_g] val_g`` (C, n).

        Parameters
        ----------
        state : dict
            ``w`` (C, F) and ``lam`` (C, G).
        arrays : dict
            What :meth:`arrays` gave.
        """
        return jnp.einsum("cgn,gn->cn", state["w"][:, arrays["idx"]], arrays["val"])

    def gibbs_update(self, key, state, arrays, target, precision) -> dict:
        """The groups' weights one group after the other (each group's weights are
        independent normals given the other groups), then the groups' precisions.

        Parameters
        ----------
        key : jax.Array, shape (C,)
            One PRNG key per chain.
        state : dict
            ``w`` (C, F) and ``lam`` (C, G).
        arrays : dict
            What :meth:`arrays` gave at the ratings (row order).
        target : jax.Array, shape (C, n)
            The ratings minus ``theta`` and the other offsets.
        precision : jax.Array, shape (C, n)
            Each rating's precision.
        """
        idx, val, group = arrays["idx"], arrays["val"], arrays["group"]
        G, F = idx.shape[0], group.shape[0]
        w, lam = state["w"], state["lam"]
        dtype = w.dtype
        split = jax.vmap(jax.random.split)(key)
        kz, kl = split[:, 0], split[:, 1]
        # one standard normal per feature: each feature is drawn in its own group's block
        z = jax.vmap(lambda k: _rng.normal(k, (F,), dtype))(kz)
        part = w[:, idx] * val  # (C, G, n): each group's term at each rating
        rest = target - jnp.sum(part, axis=1)

        for g in range(G):
            r = rest + part[:, g]
            xx, xr = _feature_sums(precision, val[g], r, idx[g], F)
            prec = lam[:, group] + xx
            w = jnp.where(group == g, xr / prec + z / jnp.sqrt(prec), w)
            new = w[:, idx[g]] * val[g]
            rest = r - new
        size = jnp.zeros(G, dtype).at[group].add(1.0)
        sq = jax.ops.segment_sum((w * w).T, group, G).T  # (C, G)
        shape = self.a + 0.5 * size
        gam = jax.vmap(lambda k, s: _rng.gamma(k, s, (G,), dtype))(
            kl, jnp.broadcast_to(shape, sq.shape)
        )
        return {"w": w, "lam": gam / (self.b + 0.5 * sq)}

    def draws(self, state: dict, store_factors: bool) -> dict:
        """``context_lam`` (C, G) and, with the factors, ``context_w`` (C, F).

        Parameters
        ----------
        state : dict
            ``w`` and ``lam``.
        store_factors : bool
            Whether the run keeps the factors.
        """
        out = {"context_lam": state["lam"]}
        if store_factors:
            out["context_w"] = state["w"]
        return out

    # ------------------------------------------------------------------ VB
    def vb_state(self, arrays: dict, C: int, dtype) -> dict:
        """``q(w_f) = N(0, b / a)`` (the prior's variance at ``E[lam] = a / b``) and
        ``q(lam_g) = Gamma(a, b)`` (the prior).

        Parameters
        ----------
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        C : int
            The number of runs.
        dtype : dtype
            The float dtype of the run.
        """
        G, F = arrays["idx"].shape[0], arrays["group"].shape[0]
        return {
            "w_mean": jnp.zeros((C, F), dtype),
            "w_var": jnp.full((C, F), self.b / self.a, dtype),
            "lam_shape": jnp.full((C, G), self.a, dtype),
            "lam_rate": jnp.full((C, G), self.b, dtype),
        }

    def vb_moments(self, q: dict, arrays: dict) -> tuple[jax.Array, jax.Array]:
        """``E[s_k] = sum_g E[w_(g,k)] x_gk`` and ``Var[s_k] = sum_g Var[w_(g,k)] x_gk^2``
        (C, n): the groups' weights are independent under q.

        Parameters
        ----------
        q : dict
            ``w_mean``, ``w_var`` (C, F) and ``lam_shape``, ``lam_rate`` (C, G).
        arrays : dict
            What :meth:`arrays` gave.
        """
        idx, val = arrays["idx"], arrays["val"]
        mean = jnp.einsum("cgn,gn->cn", q["w_mean"][:, idx], val)
        var = jnp.einsum("cgn,gn->cn", q["w_var"][:, idx], val * val)
        return mean, var

    def vb_draws(self, q: dict, arrays: dict, S: int, rng) -> np.ndarray:
        """``S`` draws of ``s`` at the entries (S, n): the weights drawn from ``q(w)``
        (independent normals), then ``sum_g w_(g,k) x_gk``.

        Parameters
        ----------
        q : dict
            ``w_mean``, ``w_var`` (F,) of one run.
        arrays : dict
            What :meth:`arrays` gave.
        S : int
            The number of draws.
        rng : numpy.random.Generator
            The source of the draws.
        """
        mean, sd = np.asarray(q["w_mean"], np.float64), np.sqrt(np.asarray(q["w_var"], np.float64))
        idx, val = np.asarray(arrays["idx"]), np.asarray(arrays["val"], np.float64)
        w = mean + sd * rng.standard_normal((S,) + mean.shape)
        return np.einsum("sgn,gn->sn", w[:, idx], val)

    def vb_update(self, q: dict, arrays: dict, target: jax.Array, precision: jax.Array) -> dict:
        """``q(w)`` group after group, then ``q(lam)``: for feature ``f`` of group ``g``,
        precision ``E[lam_g] + sum_{k: f} p_k x_kf^2`` and mean ``sum_{k: f} p_k x_kf r_k /
        precision``, with ``r_k`` the target minus the other groups' means (a rating has at
        most one feature per group, so the group's features are independent given the
        rest); ``q(lam_g) = Gamma(a + F_g / 2, b + sum_{f in g} E[w_f^2] / 2)``.

        Parameters
        ----------
        q : dict
            ``w_mean``, ``w_var`` (C, F) and ``lam_shape``, ``lam_rate`` (C, G).
        arrays : dict
            What :meth:`arrays` gave at the ratings (row order).
        target : jax.Array, shape (C, n)
            The ratings minus ``E[theta]`` and the other offsets' means.
        precision : jax.Array, shape (C, n)
            Each rating's precision.
        """
        idx, val, group = arrays["idx"], arrays["val"], arrays["group"]
        G, F = idx.shape[0], group.shape[0]
        mean, var = q["w_mean"], q["w_var"]
        Elam = q["lam_shape"] / q["lam_rate"]
        part = mean[:, idx] * val  # (C, G, n)
        rest = target - jnp.sum(part, axis=1)
        for g in range(G):
            r = rest + part[:, g]
            xx, xr = _feature_sums(precision, val[g], r, idx[g], F)
            prec = Elam[:, group] + xx
            mean = jnp.where(group == g, xr / prec, mean)
            var = jnp.where(group == g, 1.0 / prec, var)
            rest = r - mean[:, idx[g]] * val[g]
        size = jnp.zeros(G, mean.dtype).at[group].add(1.0)
        sq = jax.ops.segment_sum((mean * mean + var).T, group, G).T  # (C, G)
        return {
            "w_mean": mean,
            "w_var": var,
            "lam_shape": jnp.broadcast_to(self.a + 0.5 * size, sq.shape).astype(mean.dtype),
            "lam_rate": self.b + 0.5 * sq,
        }

    def vb_elbo_term(self, q: dict, arrays: dict) -> jax.Array:
        """``sum_f (E[log lam_g] - E[lam_g] E[w_f^2] + 1 + log Var[w_f]) / 2`` (``E[log
        p(w | lam)] + H[q(w)]``, the ``log 2 pi`` cancel) plus ``sum_g E[log p(lam_g)] -
        E[log q(lam_g)]`` (C,).

        Parameters
        ----------
        q : dict
            ``w_mean``, ``w_var`` (C, F) and ``lam_shape``, ``lam_rate`` (C, G).
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        """
        ls, lr = q["lam_shape"], q["lam_rate"]
        Elam, Elog = ls / lr, digamma(ls) - jnp.log(lr)
        mean, var, group = q["w_mean"], q["w_var"], arrays["group"]
        w_part = 0.5 * (1.0 + jnp.log(var) - Elam[:, group] * (mean * mean + var) + Elog[:, group])
        a, b = self.a, self.b
        log_p = a * math.log(b) - math.lgamma(a) + (a - 1.0) * Elog - b * Elam
        log_q = ls * jnp.log(lr) - gammaln(ls) + (ls - 1.0) * Elog - lr * Elam
        return jnp.sum(w_part, -1) + jnp.sum(log_p - log_q, -1)
