"""One transition of the Gibbs sampler: :func:`sweep` (the factor blocks, the components'
blocks, the optional moves; the first non-finite draw recorded) and :func:`step` (a sweep
plus the running sums: posterior mean at the requested entries, RMSE traces).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ... import _rng
from ...offsets import shift_clip
from ...priors import Prior
from .. import thinning
from .anneal import ANNEAL_STREAM, annealed_switch
from .columns import COLUMN_STREAM, column_moves, fused_moves
from .latent import (
    LATENT_STREAM,
    latent_block,
    latent_cuts,
    level_probs,
    ratings_theta,
    ratings_view,
    weights_block,
)
from .per_rating import offsets_block
from .rows import FactorRows, sweep_factors
from .state import PER_RATING, GibbsProblem, GibbsState, RunStats, entries

__all__ = ["sweep", "step", "check_failure", "is_kept"]


def sweep(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One Gibbs sweep: (row biases,) rows of M, (column biases,) rows of N, then (tau,)
    the prior's variables (and the bias variances), then the moves; of the accumulators,
    records only the sweep's own events: the first non-finite draw in ``stats.failure`` and
    the annealed switches in ``stats.switches``.  Its gamma variates come from the sampler
    of ``problem.options.gamma_sampler``."""
    with _rng.using_gamma_sampler(problem.options.gamma_sampler):
        return _sweep(state, problem, prior)


def _sweep(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    keys, z, kg, kt, kv = _sweep_draws(state, problem)
    tb = problem.block_precision(state.tau)
    lik_state = state.lik_state
    if problem.latent or problem.weighted:
        # its own key stream: the other blocks draw from the keys they use without it
        block = latent_block if problem.latent else weights_block
        lik_state = block(
            state, problem, jax.vmap(lambda k: jax.random.fold_in(k, LATENT_STREAM))(state.key)
        )
    values = ratings_view(lik_state, problem, state.offset_state)
    sum_sq = jnp.broadcast_to(problem.sum_sq, state.tau.shape)
    if problem.weighted or (problem.offsets and problem.learned_tau):
        # the (weighted) SSE's constant term, per chain, of the values the blocks fit
        y = values[0].values if problem.offsets else problem.rows.values[None]
        sum_sq = jnp.sum(lik_state.get("w", 1.0) * y**2, axis=1)
    fused = None
    opts = problem.options
    if opts.column_moves and opts.fuse_column_moves:
        fused = fused_moves(state, problem, prior, _column_keys(state))
    res = sweep_factors(problem, state, prior, z, tb, values, fused)
    M, N, b, c = res.M, res.N, res.b, res.c
    if fused is not None:  # the rows were drawn at the moved gamma; the prior's block redraws it
        state = state._replace(prior_state={**state.prior_state, "gamma": res.gamma})
    tau, bias_var, prior_state = jax.vmap(
        _rng.draw_together(functools.partial(_chain_blocks, problem, prior))
    )(
        ChainBlocks(kt, kv, kg),
        sum_sq + res.stats.part,
        res.stats.sumsq,
        res.stats.sM,
        res.stats.sN,
        state.tau,
        state.bias_var,
        state.prior_state,
    )
    offset_state = state.offset_state
    if problem.offsets:  # the offsets given the new factors, biases and tau
        offset_state = _offsets_block(problem, state, lik_state, res, problem.block_precision(tau))
    bias_state = state.bias_link
    if problem.bias_links:  # feature-driven biases: their link's blocks, all chains
        from ...offsets import bias_link

        bias_var, bias_state = bias_link.link_update(
            problem.biases, kv, (b, c), state.bias_var, state.bias_link, problem.bias_links
        )
    new = state._replace(
        M=M,
        N=N,
        prior_state=prior_state,
        tau=tau,
        row_bias=b,
        col_bias=c,
        bias_var=bias_var,
        bias_link=bias_state,
        key=keys,
        lik_state=lik_state,
        offset_state=offset_state,
    )
    new, switched = _moves(new, state, problem, prior)
    stats = state.stats
    failure = _first_failure(
        stats.failure, state.iteration + 1, (res.badM, res.badN, ~jnp.isfinite(_variables(new)[1]))
    )
    switches = stats.switches if switched is None else stats.switches + switched
    return new._replace(stats=stats._replace(failure=failure, switches=switches))


def _offsets_block(problem: GibbsProblem, state: GibbsState, lik_state: dict, res, tb):
    """The offsets' blocks given the sweep's new factors and biases (``res``), the
    likelihood's per-rating variables and the block precision ``tb`` (C,)."""
    new = state._replace(M=res.M, N=res.N, row_bias=res.b, col_bias=res.c, offset_state={})
    theta = ratings_theta(new, dataclasses.replace(problem, offsets=()))
    y = lik_state["z"] if problem.latent else problem.rows.values[None]
    precision = tb[:, None] * lik_state.get("w", 1.0)
    precision = jnp.broadcast_to(precision, theta.shape)
    return offsets_block(problem, state.offset_state, state.key, y - theta, precision)


def _update_links(problem: GibbsProblem) -> dict:
    """The link arrays the prior's block reads: all of them on one device; on a mesh the
    replicated ones (those split by rows live in the factor blocks' devices)."""
    if problem.mesh is None:
        return problem.links
    from ...priors.macau.sharded import link_layout, replicated_links

    return replicated_links(problem.links, link_layout(problem.links))


def _sweep_draws(state: GibbsState, problem: GibbsProblem):
    """The keys of a sweep from each chain's key: the next keys, the factor rows' standard
    normals (:class:`~bmczoo.inference.gibbs.rows.FactorRows`), and the keys of the prior,
    of ``tau`` and of the bias variances (None when the model has neither)."""
    m1, m2 = problem.dims
    K = state.M.shape[-1]
    dtype = state.M.dtype
    split = jax.vmap(lambda k: jax.random.split(k, 4))(state.key)
    keys, kM, kN, kg = split[:, 0], split[:, 1], split[:, 2], split[:, 3]
    use_bias = problem.biases is not None
    kt = kb = kc = kv = None
    if use_bias or problem.learned_tau:
        # the extra components' keys come from the prior's key: a model without them
        # keeps the keys of the plain sweep
        more = jax.vmap(lambda k: jax.random.split(k, 5))(kg)
        kg, kt, kb, kc, kv = (more[:, i] for i in range(5))
    # the factors' and the biases' normals (each key's own draw) from one threefry hash;
    # chain c's do not depend on C, nor on the number of devices: a sharded sweep slices
    # these same draws
    C = keys.shape[0]
    sites = [(kM, m1 * K), (kN, m2 * K)] + ([(kb, m1), (kc, m2)] if use_bias else [])
    z = _rng.normals_together(sites, dtype)
    zM, zN = z[0].reshape(C, m1, K), z[1].reshape(C, m2, K)
    if use_bias:
        zb, zc = z[2], z[3]
    else:
        zb, zc = jnp.zeros((C, m1), dtype), jnp.zeros((C, m2), dtype)
    return keys, FactorRows(zM, zN, zb, zc), kg, kt, kv


class ChainBlocks(NamedTuple):
    """The keys of a chain's blocks after the factors: ``tau`` (None: fixed), the bias
    variances (None: neither biases nor a learned ``tau``) and the prior's variables."""

    tau: jax.Array | None
    bias_var: jax.Array | None
    prior: jax.Array


def _chain_blocks(problem: GibbsProblem, prior: Prior, keys: ChainBlocks, sse, sumsq, sM, sN, *old):
    """One chain's blocks after the factors: a learned ``tau`` from the (weighted) squared
    error ``sse`` (the sum of the squared values plus the factor blocks' part), the bias variances from the biases' sums of squares ``sumsq`` (2,),
    then the prior's variables from the factors' statistics ``sM``, ``sN``; ``old`` the
    chain's ``(tau, bias_var, prior_state)``, kept where the model has no such block.  Its
    small gamma and normal draws are made in one call per kind
    (:func:`bmczoo._rng.draw_together`)."""
    tau, bias_var, prior_state = old
    m1, m2 = problem.dims
    if problem.learned_tau:
        sse = jnp.maximum(sse, 0.0)  # rounding can take a tiny SSE below zero
        tau = problem.likelihood.sample_tau(keys.tau, sse, problem.num_ratings)
    if problem.biases is not None and not problem.bias_links:  # linked: bias_link.link_update
        bias_var = jnp.stack(
            [
                problem.biases.sample_variance(k, q, m)
                for k, q, m in zip(jax.random.split(keys.bias_var), (sumsq[0], sumsq[1]), (m1, m2))
            ]
        )
    if problem.links:
        links = _update_links(problem)
        prior_state = prior.link_update(keys.prior, prior_state, sM, sN, m1, m2, links)
    else:
        prior_state = prior.gibbs_update(keys.prior, sM, sN, m1, m2)
    return tau, bias_var, prior_state


def _moves(new: GibbsState, state: GibbsState, problem: GibbsProblem, prior: Prior):
    """The moves that end a sweep: the column moves and the annealed switch, when the
    problem asks for them and they are due (``state`` the state before the sweep).
    Returns the state and the switch counts (C, 2) of the sweep (None without the switch)."""
    opts = problem.options
    if opts.column_moves and not opts.fuse_column_moves:
        kc = _column_keys(state)
        if opts.column_moves_every == 1:
            new = column_moves(new, problem, prior, kc)
        else:  # every column_moves_every-th sweep: each sweep and each round leaves the posterior invariant
            due = (state.iteration + 1) % opts.column_moves_every == 0
            new = lax.cond(due, lambda s: column_moves(s, problem, prior, kc), lambda s: s, new)
    if opts.anneal_steps:
        # every anneal_every-th sweep; its own key stream, as the column moves
        ka = jax.vmap(lambda k: jax.random.fold_in(k, ANNEAL_STREAM))(state.key)
        due = (state.iteration + 1) % opts.anneal_every == 0
        none = jnp.zeros_like(state.stats.switches)
        return lax.cond(
            due, lambda s: annealed_switch(s, problem, prior, ka), lambda s: (s, none), new
        )
    return new, None


def _column_keys(state: GibbsState):
    """The column moves' keys: their own stream (folded from the sweep's key), so that the
    other blocks draw as without them."""
    return jax.vmap(lambda k: jax.random.fold_in(k, COLUMN_STREAM))(state.key)


def _first_failure(failure, iteration, masks):
    """Keep each chain's first ``(sweep, block, row)`` with a non-finite draw."""
    for block, bad in enumerate(masks):
        hit = jnp.any(bad, axis=1)
        new = jnp.stack(
            [
                jnp.broadcast_to(iteration, hit.shape),
                jnp.full(hit.shape, block),
                jnp.argmax(bad, axis=1),
            ],
            axis=1,
        ).astype(jnp.int32)
        failure = jnp.where(((failure[:, 0] < 0) & hit)[:, None], new, failure)
    return failure


def _variables(state: GibbsState) -> tuple[list[str], jax.Array]:
    """The names and (C, V) values of the non-factor variables (the prior's, tau, bias
    variances, a latent likelihood's cut points), flattened per chain, for the failure record."""
    names, values = [], []
    extra = {k: v for k, v in state.lik_state.items() if k not in PER_RATING}
    for name, x in {**state.prior_state, **extra, **state.bias_link}.items():
        size = int(np.prod(x.shape[1:], dtype=int))
        names += [f"{name}_{i + 1}" for i in range(size)] if size > 1 else [name]
        values.append(x.reshape(x.shape[0], -1))
    names += ["tau", "row_bias_var", "col_bias_var"]
    values += [state.tau[:, None], state.bias_var]
    return names, jnp.concatenate(values, axis=1)


def check_failure(state: GibbsState, *, dtype=None) -> None:
    """Raise ``FloatingPointError`` naming the first non-finite draw, if any (host side).

    A draw of a row is non-finite when the Cholesky factorisation of its conditional
    precision failed (not positive definite in the working precision) or overflowed.
    """
    failure = np.asarray(jax.device_get(state.stats.failure)).reshape(-1, 3)
    bad = np.flatnonzero(failure[:, 0] >= 0)
    if bad.size == 0:
        return
    c = int(bad[np.argmin(failure[bad, 0])])
    it, block, row = (int(v) for v in failure[c])
    dt = np.dtype(dtype if dtype is not None else state.M.dtype).name
    if block == 2:
        names = _variables(state)[0]
        what = f"{names[row] if row < len(names) else 'a variable'} (its conditional draw was not finite)"
    else:
        what = (
            f"row {row} of {'MN'[block]} (the Cholesky factorisation of its conditional precision "
            "failed or the draw overflowed)"
        )
    hint = (
        "rerun with dtype=jnp.float64"
        if dt != "float64"
        else "check the data scale and hyper-parameters"
    )
    raise FloatingPointError(
        f"Gibbs sweep {it}, chain {c}: non-finite draw of {what} in {dt}; {hint}"
    )


def _rmse(pred, problem: GibbsProblem):
    e = problem.entries
    pred = pred[..., : e.test_values.shape[0]]
    y = shift_clip(pred, e.offset, e.clip_lo, e.clip_hi)
    return jnp.sqrt(jnp.mean((y - e.test_values) ** 2, axis=-1))


def is_kept(iteration, problem: GibbsProblem):
    """Whether the draw after ``iteration`` sweeps is kept (:func:`bmczoo.inference.thinning.is_kept`,
    aligned with NumPyro's ``fori_collect`` when ``num_total`` is known)."""
    s = problem.schedule
    num_samples = s.num_total - s.num_warmup if s.num_total else 0
    return thinning.is_kept(iteration, s.num_warmup, num_samples, s.thinning)


def step(state: GibbsState, problem: GibbsProblem, prior: Prior) -> GibbsState:
    """One sweep plus the running sums (posterior mean at requested entries, RMSE traces)."""
    state = sweep(state, problem, prior)
    it = state.iteration + 1
    return state._replace(iteration=it, stats=_accumulate(state.stats, state, problem, it))


def _accumulate(stats, chain: GibbsState, problem: GibbsProblem, it) -> RunStats:
    """``stats`` with the draw of ``chain`` (after ``it`` sweeps) added to the running sums
    when kept, and its RMSE traces at iteration ``it``."""
    e, num_total = problem.entries, problem.schedule.num_total
    theta = entries(chain, problem, e.pred_rows, e.pred_cols, "pred")
    kept = is_kept(it, problem)
    pred_sum = jnp.where(kept, stats.pred_sum + theta, stats.pred_sum)
    pred_sq = jnp.where(kept, stats.pred_sq + theta * theta, stats.pred_sq)
    num_kept = stats.num_kept + kept.astype(jnp.int32)
    proba_sum = stats.proba_sum
    if problem.latent:
        # level probabilities of this draw at the requested entries (C, P, L)
        probs = level_probs(theta, latent_cuts(chain, problem))
        proba_sum = jnp.where(kept, proba_sum + probs, proba_sum)
    rmse_draw, rmse_mean = stats.rmse_draw, stats.rmse_mean
    if problem.has_test and num_total:
        denom = jnp.maximum(num_kept, 1).astype(pred_sum.dtype)
        if problem.latent:  # RMSE of the expected level (data scale)
            lik = problem.likelihood
            draw_pred, mean_pred = lik.expected_value(probs), lik.expected_value(proba_sum / denom)
            r_draw, r_mean = _rmse_values(draw_pred, problem), _rmse_values(mean_pred, problem)
        else:
            r_draw, r_mean = _rmse(theta, problem), _rmse(pred_sum / denom, problem)
        idx = jnp.minimum(it - 1, num_total - 1)
        rmse_draw = rmse_draw.at[:, idx].set(r_draw)
        rmse_mean = rmse_mean.at[:, idx].set(jnp.where(num_kept > 0, r_mean, jnp.nan))
    return stats._replace(
        pred_sum=pred_sum,
        pred_sq=pred_sq,
        num_kept=num_kept,
        rmse_draw=rmse_draw,
        rmse_mean=rmse_mean,
        proba_sum=proba_sum,
    )


def _rmse_values(pred, problem: GibbsProblem):
    """RMSE of data-scale predictions (C, P) against the test values."""
    test_values = problem.entries.test_values
    pred = pred[..., : test_values.shape[0]]
    return jnp.sqrt(jnp.mean((pred - test_values) ** 2, axis=-1))
