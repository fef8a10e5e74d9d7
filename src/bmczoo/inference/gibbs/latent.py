"""A likelihood's per-rating block: a latent likelihood's (probit, ordered probit) cut
points and latent Gaussian ``z`` at the ratings given the factors, and the level
probabilities; a weighted likelihood's (Student-t) weights; what either gives the factor
blocks (:func:`ratings_view`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...linalg import row_ids
from .per_rating import offsets_shift
from .rows import RatingsView
from .state import GibbsProblem, GibbsState

__all__ = [
    "LATENT_STREAM",
    "ratings_theta",
    "latent_cuts",
    "latent_block",
    "weights_block",
    "ratings_view",
    "all_pairs_view",
    "level_probs",
]

#: the latent block's key stream (folded into the sweep's key)
LATENT_STREAM = 0x6C6174  # "lat"


def ratings_theta(state: GibbsState, problem: GibbsProblem) -> jax.Array:
    """``theta_k`` (C, n) at every rating, in row order (biases and offsets included)."""
    rows = problem.rows
    rid = row_ids(rows)
    theta = jnp.einsum("cnk,cnk->cn", state.M[:, rid], state.N[:, rows.index])
    if problem.biases is not None:
        theta = theta + state.row_bias[:, rid] + state.col_bias[:, rows.index]
    if problem.offsets:
        theta = theta + offsets_shift(problem, state.offset_state)
    return theta


def latent_cuts(state: GibbsState, problem: GibbsProblem) -> jax.Array:
    """The cut points (C, L-1) of each chain: learned (``lik_state["cuts"]``) or fixed."""
    if "cuts" in state.lik_state:
        return state.lik_state["cuts"]
    fixed = jnp.asarray(problem.likelihood.fixed_cuts(), state.M.dtype)
    return jnp.broadcast_to(fixed, (state.M.shape[0],) + fixed.shape)


def latent_block(state: GibbsState, problem: GibbsProblem, keys: jax.Array) -> dict:
    """A latent likelihood's block (probit, ordered probit): per chain, the cut points
    (when learned: Metropolis-Hastings with ``z`` integrated out) and then ``z`` (C, n)
    from its truncated normal given ``theta`` at the ratings (row order).  Exact block
    update of ``(cuts, z)`` given the factors and biases."""
    lik = problem.likelihood
    theta = ratings_theta(state, problem)
    cuts, z = lik.gibbs_latent(
        keys, theta, problem.levels, latent_cuts(state, problem), problem.cut_step
    )
    out = {"z": z}
    if "cuts" in state.lik_state:
        out["cuts"] = cuts
    return out


def weights_block(state: GibbsState, problem: GibbsProblem, keys: jax.Array) -> dict:
    """A weighted likelihood's block (Student-t): the weights ``w`` (C, n) (row order)
    given the factors, biases and ``tau``, from the likelihood's ``sample_weights``."""
    resid = problem.rows.values[None] - ratings_theta(state, problem)
    return {"w": problem.likelihood.sample_weights(keys, resid, state.tau)}


def ratings_view(lik_state: dict, problem: GibbsProblem, offset_state: dict | None = None):
    """The factor blocks' :class:`~bmczoo.inference.gibbs.rows.RatingsView` in row and in
    column order from the likelihood's per-rating variables (``z``: values; ``w``:
    weights) and the offsets (``offset_state``: the values minus their sum), or None
    when the blocks see the ratings themselves."""
    if problem.all_pairs:
        return all_pairs_view(problem)
    z, w = lik_state.get("z"), lik_state.get("w")
    if problem.offsets:
        y = problem.rows.values[None] if z is None else z
        z = y - offsets_shift(problem, offset_state)
    if z is None and w is None:
        return None
    perm = problem.col_perm

    def cols(x):
        return None if x is None else x[:, perm]

    return RatingsView(z, w), RatingsView(cols(z), cols(w))


def all_pairs_view(problem: GibbsProblem):
    """An ``all_pairs`` likelihood's :class:`~bmczoo.inference.gibbs.rows.RatingsView` in
    row and in column order: its targets and weights at the ratings (its
    :meth:`~bmczoo.likelihoods.Likelihood.gibbs_view` of each side's values and positions,
    O(n), the same for every chain: (1, n) each) and the unrated pairs' weight."""
    lik = problem.likelihood
    unrated = lik.unrated_weight()

    def side(csr, rows, cols):
        t, w = lik.gibbs_view(csr.values, rows, cols)
        return RatingsView(t[None], w[None], unrated)

    rows, cols = problem.rows, problem.cols
    return side(rows, row_ids(rows), rows.index), side(cols, cols.index, row_ids(cols))


def level_probs(theta: jax.Array, cuts: jax.Array) -> jax.Array:
    """``P(Y = l | theta, c)`` (C, P, L) of a latent likelihood: theta (C, P), cuts (C, L-1)."""
    from ...likelihoods.probit import level_log_probs

    return jnp.exp(level_log_probs(theta, cuts[:, None, :]))
