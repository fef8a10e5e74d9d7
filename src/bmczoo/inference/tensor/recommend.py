"""``TensorFit.recommend``: the top items of users at a context (the indices of the other
modes), scored in batches of users from the CP factors' draws.

A batch of ``B`` users at their contexts ``c`` has the per-draw weights ``w[s, u, h] =
U0[s, u, h] prod_{d >= 2} U_d[s, c_d(u), h]``, and its scores ``theta[s, u, j] = sum_h
w[s, u, h] U1[s, j, h]`` (plus the biases): ``(B, m_item)`` at a time, never anything of
the array's size.  The posterior mean over the ``S`` draws is one product of a ``(B, S K)``
and a ``(S K, m_item)`` matrix.
"""

from __future__ import annotations

import numpy as np

from ..._checks import check_choice, check_int
from ..results.outputs import _BUDGET, _check_users, _top_n, z_of

__all__ = ["recommend"]


def _check_context(context, users: np.ndarray, shape: tuple) -> np.ndarray:
    """``context`` as (len(users), D - 2) indices of the modes after the first two: one
    context for every user (an int for ``D = 3``, or ``D - 2`` ints) or one per user (a
    (len(users), D - 2) array)."""
    D = len(shape)
    c = np.asarray(context)
    if c.size and c.dtype.kind not in "iu":
        raise ValueError(f"context must hold integer indices, got {context!r}")
    if c.ndim <= 1 and c.size == D - 2:
        c = np.broadcast_to(c.reshape(1, D - 2), (users.size, D - 2))
    elif c.ndim != 2 or c.shape != (users.size, D - 2):
        raise ValueError(
            f"context must be the index of each of the {D - 2} mode(s) after the first two "
            f"(an int for a 3-way array, or {D - 2} ints), the same for every user, or a "
            f"({users.size}, {D - 2}) array, one per user; got shape {np.shape(context)}"
        )
    for d in range(D - 2):
        m = shape[d + 2]
        if c.size and (c[:, d].min() < 0 or c[:, d].max() >= m):
            raise ValueError(f"context of mode {d + 2} must be in [0, {m}), got {c[:, d]}")
    return np.asarray(c, np.int64)


def _check_exclude(exclude_seen) -> str | None:
    """``exclude_seen`` as None (nothing excluded), ``"any"`` or ``"context"``."""
    if isinstance(exclude_seen, str) and exclude_seen in ("any", "context"):
        return exclude_seen
    if not isinstance(exclude_seen, (bool, np.bool_)):
        raise ValueError(
            f"exclude_seen must be True, False, 'any' or 'context', got {exclude_seen!r}"
        )
    return "any" if exclude_seen else None


def _seen_index(fit, seen) -> np.ndarray:
    """The (n, D) pattern that ``exclude_seen`` leaves out: ``seen``'s entries, else the
    training entries the fit holds."""
    from ...data import TensorData

    if seen is not None:
        if not isinstance(seen, TensorData):
            raise TypeError(f"seen must be a TensorData, got {type(seen).__name__}")
        if tuple(seen.shape) != fit.shape:
            raise ValueError(f"seen has shape {seen.shape}, the fit has {fit.shape}")
        return np.asarray(seen.indices)
    if fit.seen_index is None:
        raise ValueError(
            "exclude_seen needs the training entries, which this result does not hold: pass "
            "seen= (a TensorData) or exclude_seen=False"
        )
    return np.asarray(fit.seen_index)


def _seen_items(index: np.ndarray, users: np.ndarray, ctx: np.ndarray, mode: str) -> list:
    """The items to leave out for each user: those it has in ``index`` at any context
    (``mode="any"``) or at its own context (``"context"``)."""
    order = np.argsort(index[:, 0], kind="stable")
    index = index[order]
    start = np.searchsorted(index[:, 0], users, "left")
    stop = np.searchsorted(index[:, 0], users, "right")
    out = []
    for k in range(users.size):
        rows = index[start[k] : stop[k]]
        if mode == "context":
            rows = rows[np.all(rows[:, 2:] == ctx[k], axis=1)]
        out.append(rows[:, 1])
    return out


class _Draws:
    """The fit's factor draws, one leading axis of ``S`` draws, float64."""

    def __init__(self, fit):
        D = len(fit.shape)
        U = [np.asarray(fit.factors[f"U{d}"], np.float64) for d in range(D)]
        self.S = U[0].shape[0] * U[0].shape[1]
        self.U = [u.reshape(self.S, *u.shape[2:]) for u in U]
        self.K = self.U[0].shape[-1]
        self.bias = None
        if "b0" in fit.factors:
            self.bias = [
                np.asarray(fit.factors[f"b{d}"], np.float64).reshape(self.S, -1) for d in range(D)
            ]
        # U1 as (S K, m_item): the mean's product
        self.items_flat = np.ascontiguousarray(np.swapaxes(self.U[1], 1, 2)).reshape(
            self.S * self.K, -1
        )

    def weights(self, users, ctx):
        """``w`` (S, B, K) and the biases that do not depend on the item (S, B)."""
        w = self.U[0][:, users]
        shift = np.zeros(w.shape[:2]) if self.bias is None else self.bias[0][:, users]
        for d in range(ctx.shape[1]):
            w = w * self.U[d + 2][:, ctx[:, d]]
            if self.bias is not None:
                shift = shift + self.bias[d + 2][:, ctx[:, d]]
        return w, shift

    def item_bias(self, s=None):
        if self.bias is None:
            return 0.0
        return self.bias[1].mean(0) if s is None else self.bias[1][s]


def _scores(draws: _Draws, users, ctx, by: str, z: float, noise_var: float, pick) -> np.ndarray:
    """(B, m_item) scores on the centred scale: the posterior mean, its upper end (mean +
    ``z`` sd, the draws' variance plus the noise's) or one draw per user (``pick``)."""
    w, shift = draws.weights(users, ctx)
    S, B = draws.S, users.size
    if by == "thompson":
        s = pick
        t = np.einsum("bk,bjk->bj", w[s, np.arange(B)], draws.U[1][s])
        return t + shift[s, np.arange(B)][:, None] + draws.item_bias(s)
    flat = np.swapaxes(w, 0, 1).reshape(B, S * draws.K)
    mean = flat @ draws.items_flat / S + np.mean(shift, axis=0)[:, None] + draws.item_bias()
    if by == "mean":
        return mean
    sq = np.zeros_like(mean)
    for s in range(S):  # about the mean (two-pass)
        t = w[s] @ draws.U[1][s].T + shift[s][:, None] + draws.item_bias(s)
        sq += (t - mean) ** 2
    return mean + z * np.sqrt(sq / S + noise_var)


def recommend(fit, users, context, n, exclude_seen, by, *, prob, seed, seen, batch_size):
    """:meth:`TensorFit.recommend <bmczoo.inference.TensorFit.recommend>` (its
    arguments, checked here)."""
    check_choice("by", by, ("mean", "upper", "thompson"))
    exclude = _check_exclude(exclude_seen)
    shape = fit.shape
    n = check_int("n", n, minimum=1)
    if n > shape[1]:
        raise ValueError(f"n={n} exceeds the number of items {shape[1]}")
    users = _check_users(users, shape[0])
    ctx = _check_context(context, users, shape)
    if by == "thompson" and seed is None:
        raise ValueError('by="thompson" draws from the posterior: give seed=')
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
    z = z_of(prob) if by == "upper" else 0.0
    draws = _Draws(fit)
    # one draw per user, drawn at once: the same for any batch size
    pick = (
        np.random.default_rng(seed).integers(0, draws.S, size=users.size)
        if seed is not None
        else None
    )
    excluded = None
    if exclude is not None:
        excluded = _seen_items(_seen_index(fit, seen), users, ctx, exclude)
    m = shape[1]
    B = batch_size or max(1, _BUDGET // max(m * draws.K, draws.S * draws.K))
    items = np.full((users.size, n), -1, np.int64)
    scores = np.full((users.size, n), -np.inf)
    noise = fit.noise_var() if by == "upper" else 0.0
    for b0 in range(0, users.size, B):
        sl = slice(b0, b0 + B)
        p = None if pick is None else pick[sl]
        sc = _scores(draws, users[sl], ctx[sl], by, z, noise, p) + fit.info.shift.offset
        if excluded is not None:
            for k, drop in enumerate(excluded[sl]):
                sc[k, drop] = -np.inf
        items[sl], scores[sl] = _top_n(sc, n)
    return items, scores
