"""The problem's per-rating data and variables besides the ratings: a likelihood's (the
latent levels and ``z`` of the probit likelihoods, the weights of a scale mixture) and the
sampled offsets' (:class:`bmczoo.offsets.base.Offset`: their arrays at the ratings and at
the requested entries, their start, their value at the ratings and their blocks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...data import RatingData
from ...linalg import device_array
from ..settings import SweepOptions

__all__ = [
    "OFFSET_STREAM",
    "check_likelihood_support",
    "bind_likelihood",
    "latent_data",
    "likelihood_start",
    "check_offsets_support",
    "offset_arrays",
    "offsets_start",
    "offsets_shift",
    "offsets_block",
]

#: the offsets' key stream (folded into the sweep's key)
OFFSET_STREAM = 0x6F6666  # "off"


def check_likelihood_support(
    likelihood, mesh, options: SweepOptions, *, offsets: tuple = ()
) -> None:
    """A clear error where a per-rating block meets several devices or the annealed switch,
    and where a likelihood that observes every pair meets what it does not implement (its
    sweep takes the biases: their sums over every pair are shared terms of the factor
    blocks' sums, :func:`~bmczoo.inference.gibbs.rows.row_sums`)."""
    if likelihood is None:
        return
    if likelihood.all_pairs:
        _check_all_pairs_support(likelihood, mesh, options, offsets)
    if (likelihood.latent or likelihood.weighted) and mesh is not None:
        raise ValueError(
            f"the {likelihood.name} likelihood runs on one device: its sharded per-rating block "
            "is not implemented (drop devices=)"
        )
    if likelihood.weighted and options.anneal_steps:
        raise ValueError(
            f"the annealed switch (anneal_steps) is not implemented with the {likelihood.name} "
            "likelihood's per-rating weights (drop anneal_steps)"
        )


def _check_all_pairs_support(likelihood, mesh, options: SweepOptions, offsets) -> None:
    """The components an ``all_pairs`` likelihood's sweep does not implement: their blocks
    would need sums over every pair of the matrix."""
    what = {
        "sampled offsets (context=)": bool(offsets),
        "several devices (devices=)": mesh is not None,
        "the annealed switch (anneal_steps)": bool(options.anneal_steps),
    }
    bad = [name for name, given in what.items() if given]
    if bad:
        raise ValueError(
            f"the {likelihood.name} likelihood's Gibbs sweep does not implement {bad[0]}: "
            "its blocks would need sums over every pair of the matrix (drop it)"
        )


def bind_likelihood(likelihood, ratings: RatingData):
    """A latent likelihood bound to the data (levels, threshold) when it is not yet
    (:meth:`bmczoo.likelihoods.probit.LatentLikelihood.bind`); others unchanged.  The
    likelihood checks the values (:meth:`~bmczoo.likelihoods.Likelihood.check_values`)."""
    if likelihood is not None:
        likelihood.check_values(ratings.values)
    if likelihood is not None and likelihood.latent and not likelihood.bound:
        return likelihood.bind(ratings.values)
    return likelihood


def latent_data(likelihood, ratings: RatingData, dtype, offsets: tuple = ()) -> dict:
    """``levels`` (row order), ``col_perm`` and ``cut_step`` of a latent likelihood (empty
    arrays otherwise; ``col_perm`` also for a weighted likelihood and with offsets: what
    puts per-rating values in column order)."""
    e = device_array(np.zeros(0, np.int32))
    out = {"levels": e, "col_perm": e, "cut_step": device_array(np.zeros(0), dtype)}
    per_rating = likelihood is not None and (likelihood.latent or likelihood.weighted)
    if not (per_rating or offsets):
        return out
    rv, cv = ratings.row_view, ratings.col_view
    row_pos = np.empty(ratings.n, np.int64)
    row_pos[np.asarray(rv.order)] = np.arange(ratings.n)
    out["col_perm"] = jnp.asarray(row_pos[np.asarray(cv.order)].astype(np.int32))
    if likelihood is not None and likelihood.latent:
        levels = likelihood.level_index(rv.values)
        out["levels"] = jnp.asarray(levels)
        out["cut_step"] = jnp.asarray(likelihood.cut_step(levels), dtype)
    return out


def likelihood_start(problem, C: int, dtype) -> tuple[dict, int]:
    """A latent likelihood's variables at the start (``z`` zero, the cut points at the
    likelihood's start when learned) and its number of levels (empty and 0 otherwise)."""
    if problem.weighted:  # unit weights: the first sweep draws them
        return {"w": jnp.ones((C, problem.num_ratings), dtype)}, 0
    if not problem.latent:
        return {}, 0
    lik = problem.likelihood
    L = lik.num_levels
    lik_state = {"z": jnp.zeros((C, problem.num_ratings), dtype)}
    if lik.fixed_cuts() is None:
        cuts0 = lik.init_cuts(np.asarray(problem.levels))
        lik_state["cuts"] = jnp.broadcast_to(jnp.asarray(cuts0, dtype), (C, L - 1))
    return lik_state, L


# ---------------------------------------------------------------------- offsets
def _positions(ratings: RatingData, rows, cols, what: str) -> np.ndarray:
    """The positions in ``ratings`` of the entries ``(rows, cols)`` (each must be a rating:
    an offset is known at the ratings only)."""
    m2 = ratings.shape[1]
    key = ratings.rows.astype(np.int64) * m2 + ratings.cols
    order = np.argsort(key, kind="stable")
    want = np.asarray(rows, np.int64) * m2 + np.asarray(cols, np.int64)
    at = np.minimum(np.searchsorted(key[order], want), max(key.size - 1, 0))
    found = key.size > 0 and key[order][at] == want
    if not np.all(found):
        k = int(np.flatnonzero(~np.asarray(found))[0]) if want.size else 0
        raise ValueError(
            f"{what} entry ({int(np.asarray(rows)[k])}, {int(np.asarray(cols)[k])}) is not a "
            "rating: with an offset, only rated entries have its per-rating data"
        )
    return order[at]


def check_offsets_support(offsets, mesh) -> tuple:
    """The offsets as a tuple, checked: sampled offsets with distinct names (their
    variables are kept under them), on one device."""
    from ...offsets import Offset

    offsets = tuple(offsets)
    bad = [o for o in offsets if not isinstance(o, Offset)]
    if bad:
        raise TypeError(f"offsets must be bmczoo.offsets.Offset components, got {bad[0]!r}")
    names = [o.name for o in offsets]
    if len(set(names)) != len(names):
        raise ValueError(f"offsets must have distinct names, got {', '.join(names)}")
    if offsets and mesh is not None:
        raise ValueError(
            "sampled offsets run on one device: their sharded block is not implemented "
            "(drop devices=)"
        )
    return offsets


def offset_arrays(offsets: tuple, ratings: RatingData, entries, entry_arrays, dtype) -> dict:
    """Each offset's arrays (a tuple in the order of ``offsets``) at the ratings in row
    order (``"ratings"``), at the requested entries (``"pred"``: read from
    ``entries.context``, their per-rating table, a :class:`~bmczoo.data.Features` with one
    row per entry) and at the tracked entries (``"track"``: ratings of the training data);
    ``entry_arrays`` the problem's :class:`~bmczoo.inference.gibbs.state.EntryArrays`."""
    if not offsets:
        return {}
    e = entry_arrays
    pred = np.asarray(e.pred_rows), np.asarray(e.pred_cols)
    track = np.asarray(e.track_rows), np.asarray(e.track_cols)
    P = int(np.asarray(pred[0]).shape[0])
    ctx = entries.context
    if ctx is not None and ctx.n_rows != P:
        raise ValueError(f"Entries.context has {ctx.n_rows} rows for {P} predict entries")
    at_rows = np.asarray(ratings.row_view.order)
    at_track = _positions(ratings, track[0], track[1], "a tracked")

    def table(at):
        return None if ratings.context is None else ratings.context.take(at)

    out = {"ratings": [], "pred": [], "track": []}
    for o in offsets:
        out["ratings"].append(o.arrays(table(at_rows), ratings.n, dtype))
        out["track"].append(o.arrays(table(at_track), len(at_track), dtype))
        out["pred"].append(o.arrays(ctx if P else table(at_track[:0]), P, dtype))
    return {k: tuple(v) for k, v in out.items()}


def offsets_start(problem, C: int, dtype) -> dict:
    """Each offset's variables at the start, by the offset's name."""
    return {
        o.name: o.gibbs_state(a, C, dtype)
        for o, a in zip(problem.offsets, problem.offset_arrays.get("ratings", ()))
    }


def offsets_shift(problem, offset_state: dict, where: str = "ratings"):
    """The sum of the offsets (C, n) at the ratings in row order (``where="pred"`` /
    ``"track"``: at the requested / tracked entries); None without offsets."""
    if not problem.offsets:
        return None
    arrays = problem.offset_arrays[where]
    return sum(o.shift(offset_state[o.name], a) for o, a in zip(problem.offsets, arrays))


def offsets_block(problem, offset_state: dict, keys, target, precision) -> dict:
    """The offsets' blocks, one after the other: each given ``target`` (the ratings, or a
    latent likelihood's ``z``, minus ``theta``; (C, n), row order) minus the other
    offsets, with each rating's ``precision`` (C, n).  ``keys``: the chains' sweep keys
    (each offset draws from its own stream folded from them)."""
    arrays = problem.offset_arrays["ratings"]
    if len(problem.offsets) == 1:  # nothing else to take out of the target
        (o,), (a,) = problem.offsets, arrays
        ko = jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, OFFSET_STREAM), 0))(keys)
        return {o.name: o.gibbs_update(ko, offset_state[o.name], a, target, precision)}
    parts = [o.shift(offset_state[o.name], a) for o, a in zip(problem.offsets, arrays)]
    total = sum(parts)
    out = dict(offset_state)
    for i, (o, a) in enumerate(zip(problem.offsets, arrays)):
        ko = jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, OFFSET_STREAM), i))(keys)
        rest = total - parts[i]
        out[o.name] = o.gibbs_update(ko, offset_state[o.name], a, target - rest, precision)
        parts[i] = o.shift(out[o.name], a)
        total = rest + parts[i]
    return out
