"""The sampled offsets in mean-field VB (:class:`bmczoo.offsets.base.Offset`'s VB hooks).

The offsets' q-state lives in :attr:`VBState.offsets <bmczoo.inference.vb.state.VBState>`
as one flat dict, ``"<offset name>/<variable>"`` (so that saving and checkpoints see
arrays by name like the other parts).  The factor updates see the ratings minus
``E_q[s_k]``; each offset's update sees the ratings minus ``E_q[theta_k]`` and the other
offsets' means; the expected squared error gains ``sum_k Var_q[s_k]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["check_vb_offsets", "init", "moments", "block", "elbo_term", "own", "sq_correction"]


def check_vb_offsets(offsets: tuple) -> None:
    """A clear error for an offset without VB hooks."""
    for o in offsets:
        if not o.has_vb:
            raise ValueError(
                f"method='vb' has no update for the {o.name} offset: use method='gibbs'"
            )


def own(q: dict, name: str) -> dict:
    """The variables of offset ``name`` in the flat q-state ``q``."""
    pre = f"{name}/"
    return {k[len(pre) :]: v for k, v in q.items() if k.startswith(pre)}


def _flat(name: str, q: dict) -> dict:
    return {f"{name}/{k}": v for k, v in q.items()}


def init(offsets: tuple, arrays: tuple, C: int, dtype) -> dict:
    """The offsets' starting q-state (flat)."""
    out = {}
    for o, a in zip(offsets, arrays):
        out.update(_flat(o.name, o.vb_state(a, C, dtype)))
    return out


def moments(offsets: tuple, q: dict, arrays: tuple) -> tuple[jax.Array, jax.Array]:
    """``E_q[s_k]`` and ``Var_q[s_k]`` (C, n) of the offsets' sum (independent under q)."""
    parts = [o.vb_moments(own(q, o.name), a) for o, a in zip(offsets, arrays)]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def block(offsets: tuple, q: dict, arrays: tuple, target: jax.Array, precision) -> dict:
    """The offsets' updates one after the other, each given ``target`` (the ratings minus
    ``E_q[theta]``, (C, n)) minus the other offsets' means, with each rating's
    ``precision`` (C, n)."""
    means = [o.vb_moments(own(q, o.name), a)[0] for o, a in zip(offsets, arrays)]
    total = sum(means)
    out = {}
    for i, (o, a) in enumerate(zip(offsets, arrays)):
        rest = total - means[i]
        new = o.vb_update(own(q, o.name), a, target - rest, precision)
        out.update(_flat(o.name, new))
        means[i] = o.vb_moments(new, a)[0]
        total = rest + means[i]
    return out


def elbo_term(offsets: tuple, q: dict, arrays: tuple) -> jax.Array:
    """The offsets' parts of the evidence lower bound (C,)."""
    return sum(o.vb_elbo_term(own(q, o.name), a) for o, a in zip(offsets, arrays))


def sq_correction(y: jax.Array, theta_mean: jax.Array, shift: jax.Array) -> jax.Array:
    """``sum_k E[(y_k - s_k - theta_k)^2] - sum_k E[(y_k - theta_k)^2]`` (C,) given the
    offsets' means ``shift`` (their variance is added apart): ``sum_k ((y_k - E s_k)^2 -
    y_k^2 + 2 E[s_k] E[theta_k])``, so the sum over the ratings of the plain model serves."""
    r = y - shift
    return jnp.sum(r * r - y * y + 2.0 * shift * theta_mean, axis=-1)
