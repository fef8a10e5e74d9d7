"""A latent likelihood's block (probit, ordered probit): the cut points and the latent
Gaussian ``z`` at the ratings given the factors, and the level probabilities.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...linalg import row_ids
from .state import GibbsProblem, GibbsState

__all__ = ["LATENT_STREAM", "ratings_theta", "latent_cuts", "latent_block", "level_probs"]

#: the latent block's key stream (folded into the sweep's key)
LATENT_STREAM = 0x6C6174  # "lat"


def ratings_theta(state: GibbsState, problem: GibbsProblem) -> jax.Array:
    """``theta_k`` (C, n) at every rating, in row order (biases included)."""
    rows = problem.rows
    rid = row_ids(rows)
    theta = jnp.einsum("cnk,cnk->cn", state.M[:, rid], state.N[:, rows.index])
    if problem.biases is not None:
        theta = theta + state.row_bias[:, rid] + state.col_bias[:, rows.index]
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


def level_probs(theta: jax.Array, cuts: jax.Array) -> jax.Array:
    """``P(Y = l | theta, c)`` (C, P, L) of a latent likelihood: theta (C, P), cuts (C, L-1)."""
    from ...likelihoods.probit import level_log_probs

    return jnp.exp(level_log_probs(theta, cuts[:, None, :]))
