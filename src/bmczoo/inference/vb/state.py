"""The variational state of VB (:class:`VBState`): its start, the views of it that the
updates and the ELBO share, its sharding over a mesh, and its arrays by name for
checkpoints and saved fits (:func:`state_arrays`, :func:`state_from_arrays`).

Like the Gibbs core, the arrays carry a leading axis ``C`` (independent runs from random
starts) on the factor arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ... import _rng
from ...priors import Prior
from .. import sharding as sh
from ...linalg import CSR, row_ids

__all__ = [
    "VBState",
    "Sharded",
    "init",
    "prior_q",
    "ratings_mean",
    "shard_state",
    "state_arrays",
    "state_from_arrays",
    "unshard_state",
    "vb_prior",
]


class VBState(NamedTuple):
    """Variational parameters of ``C`` independent runs.

    Parameters
    ----------
    m, V : jax.Array
        Means (C, m1, K) and covariances (C, m1, K, K) of ``q(M_i)``.
    n, W : jax.Array
        Means (C, m2, K) and covariances (C, m2, K, K) of ``q(N_j)``.
    inv_gamma : jax.Array or None
        (C, K) ``E_q[1/gamma_h]``: the column-scale priors' q-state; None for a prior of
        another family.
    ES : jax.Array
        (C, K) ``E_q[S_h]`` (every prior).
    prior : dict
        The q-state of a prior outside the column-scale family (its
        :meth:`~bmczoo.priors.Prior.vb_state`, e.g. Normal-Wishart's ``mu_M, beta_M, ...``).
    noise : dict
        ``q(tau)`` of a learned likelihood.
    bias : dict
        The q of the biases (``bmczoo.offsets.Biases.vb_state``); empty dicts when absent.
    offsets : dict
        The q of the sampled offsets (:mod:`bmczoo.inference.vb.offsets`: keys
        ``"<offset name>/<variable>"``).
    """

    m: jax.Array
    V: jax.Array
    n: jax.Array
    W: jax.Array
    inv_gamma: jax.Array | None
    ES: jax.Array
    prior: dict = {}
    noise: dict = {}
    bias: dict = {}
    offsets: dict = {}


class Sharded(NamedTuple):
    """Where a sharded state lives: the one-axis ``mesh`` its rows are spread over
    (:func:`shard_state`) and the true ``dims`` ``(m1, m2)`` (without padding rows)."""

    mesh: jax.sharding.Mesh
    dims: tuple[int, int]


def prior_q(state: VBState) -> dict:
    """The prior's q-state (the dict its VB hooks take) held by ``state``."""
    q = dict(state.prior)
    if state.inv_gamma is not None:
        q["inv_gamma"] = state.inv_gamma
    return q


def vb_prior(prior: Prior, links: dict | None):
    """The prior as the VB core sees it: ``prior`` itself, or with feature links (``links``
    non-empty: the arrays of :meth:`~bmczoo.priors.NormalWishart.gibbs_links`) a
    :class:`bmczoo.priors.macau.VBLink` that binds them.

    Parameters
    ----------
    prior : Prior
        The model's prior (or an already bound :class:`~bmczoo.priors.macau.VBLink`).
    links : dict or None
        The link arrays (None or empty: no links).

    Returns
    -------
    Prior or VBLink
        What the VB hooks are called on.
    """
    from ...priors.macau import VBLink

    if not links or isinstance(prior, VBLink):
        return prior
    return VBLink(prior, links)


def is_linked(prior) -> bool:
    """Whether ``prior`` is a prior bound to its feature links (:func:`vb_prior`)."""
    from ...priors.macau import VBLink

    return isinstance(prior, VBLink)


def split_prior_q(q: dict):
    """``(inv_gamma or None, the rest)`` of a prior's q-state (:class:`VBState`'s parts)."""
    q = dict(q)
    return q.pop("inv_gamma", None), q


def check_links(prior, links, sharded):
    """The prior as the VB core sees it (:func:`vb_prior`); feature links run on one device."""
    prior = vb_prior(prior, links)
    if is_linked(prior) and sharded is not None:
        raise ValueError(
            f"{prior.name} with feature links runs on one device: its sharded VB update is not "
            "implemented (drop devices=)"
        )
    return prior


#: the prefix of the biases' link arrays among the links of an update (the prior's have none)
BIAS_LINKS = "biases/"


def split_links(links: dict | None) -> tuple[dict, dict]:
    """``(the prior's link arrays, the biases' link arrays)`` of an update's ``links``: the
    biases' are those under ``biases/`` (their own names after it)."""
    links = links or {}
    n = len(BIAS_LINKS)
    return (
        {k: v for k, v in links.items() if not k.startswith(BIAS_LINKS)},
        {k[n:]: v for k, v in links.items() if k.startswith(BIAS_LINKS)},
    )


def check_bias_links(biases, bias_links, sharded):
    """The biases as the VB core sees them (``bmczoo.offsets.bias_link_vb.vb_biases``);
    feature-driven biases run on one device."""
    from ...offsets.bias_link_vb import vb_biases

    biases = vb_biases(biases, bias_links)
    if bias_links and sharded is not None:
        raise ValueError(
            "Biases with features run on one device: their sharded VB update is not "
            "implemented (drop devices=)"
        )
    return biases


def init(
    keys: jax.Array,
    shape: tuple[int, int],
    prior: Prior,
    K: int,
    dtype=jnp.float32,
    scale: float = 1.0,
    gamma: float | None = 1.0,
    *,
    likelihood=None,
    biases=None,
    links: dict | None = None,
) -> VBState:
    """Random means ``N(0, scale^2)`` (one key per run), zero covariances and the prior's
    starting q-state (:meth:`~bmczoo.priors.Prior.vb_state`; column scales:
    ``E[1/gamma_h] = 1/gamma``, ``gamma=None``: the prior's ``init_gamma``); the first
    update of ``q(M)`` only uses ``n``, ``W`` and the prior's, likelihood's and biases'
    q-states.  ``likelihood`` (learned: ``q(tau)`` starts at its prior) and ``biases``
    (zero means) add their q-states; ``links`` (a prior with feature links: the arrays of
    its ``gibbs_links``) adds ``q(B)`` and ``q(lam_B)`` (:func:`vb_prior`).

    A unit ``gamma`` rather than e.g. the inverse-gamma prior's mode ``b/(a+1)`` matters:
    starting from strong shrinkage, CAVI can settle on the all-zero fixed point."""
    m1, m2 = shape
    C = keys.shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    m = jax.vmap(lambda k: _rng.normal(k, (m1, K), dtype))(split[:, 0]) * scale
    n = jax.vmap(lambda k: _rng.normal(k, (m2, K), dtype))(split[:, 1]) * scale
    inv_gamma, qp = split_prior_q(vb_prior(prior, links).vb_state(K, m1, m2, C, dtype, gamma))
    return VBState(
        m=m,
        V=jnp.zeros((C, m1, K, K), dtype),
        n=n,
        W=jnp.zeros((C, m2, K, K), dtype),
        inv_gamma=inv_gamma,
        ES=jnp.zeros((C, K), dtype),
        prior=qp,
        noise={} if likelihood is None or not likelihood.learned else likelihood.vb_state(C, dtype),
        bias={} if biases is None else biases.vb_state(m1, m2, C, dtype),
    )


def ratings_mean(state: VBState, rows: CSR) -> jax.Array:
    """``E_q[theta_k]`` (C, n) at every rating in row order (biases included)."""
    rid = row_ids(rows)
    mu = jnp.einsum("cnk,cnk->cn", state.m[:, rid], state.n[:, rows.index])
    if state.bias:
        mu = mu + state.bias["b_mean"][:, rid] + state.bias["c_mean"][:, rows.index]
    return mu


def cuts_of(state: VBState, lik, C: int, dtype) -> jax.Array:
    """The cut points (C, L - 1) of a latent likelihood: learned (in ``state.noise``) or fixed."""
    if "cuts" in state.noise:
        return state.noise["cuts"]
    return jnp.broadcast_to(jnp.asarray(lik.fixed_cuts(), dtype), (C, len(lik.fixed_cuts())))


def one_run(state: VBState, c: int) -> VBState:
    """Run ``c`` of ``state``, its run axis kept (length 1)."""
    return jax.tree.map(lambda x: x[c : c + 1], state)


# ---------------------------------------------------------------- several devices
# The same iteration with the rows of q(M) / q(N) and the ratings split over the devices
# of a mesh (see bmczoo.inference.sharding): the arrays of the state have their rows
# padded to a multiple of the device count; padding rows have no ratings and are masked
# out of E[S] and of the ELBO.

FACTORS = jax.sharding.PartitionSpec(None, sh.AXIS, None)


COVARIANCES = jax.sharding.PartitionSpec(None, sh.AXIS, None, None)


REPLICATED = jax.sharding.PartitionSpec()


BLOCKS = jax.sharding.PartitionSpec(sh.AXIS)

BIAS_ROWS_SPEC = jax.sharding.PartitionSpec(None, sh.AXIS)


#: keys of the biases' q-state with a row axis (0: rows of M, 1: rows of N)
BIAS_ROWS = {"b_mean": 0, "b_var": 0, "c_mean": 1, "c_var": 1}


def bias_specs(bias: dict) -> dict:
    return {k: (BIAS_ROWS_SPEC if k in BIAS_ROWS else REPLICATED) for k in bias}


def shard_state(state: VBState, mesh) -> VBState:
    """Pad the rows of ``state`` to a multiple of the device count and shard them."""
    D = mesh.devices.size

    def put(x, rows_axis=True):
        if not rows_axis:
            return sh.put(x, sh.replicated(mesh))
        pad = sh.padded_size(x.shape[1], D) - x.shape[1]
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        spec = {2: BIAS_ROWS_SPEC, 3: FACTORS, 4: COVARIANCES}[x.ndim]
        return sh.put(x, jax.sharding.NamedSharding(mesh, spec))

    rep = lambda d: {k: put(v, False) for k, v in d.items()}  # noqa: E731
    return VBState(
        m=put(state.m),
        V=put(state.V),
        n=put(state.n),
        W=put(state.W),
        inv_gamma=None if state.inv_gamma is None else put(state.inv_gamma, False),
        ES=put(state.ES, False),
        prior=rep(state.prior),
        noise=rep(state.noise),
        bias={k: put(v, k in BIAS_ROWS) for k, v in state.bias.items()},
    )


def unshard_state(state: VBState, dims: tuple[int, int]) -> VBState:
    """Drop the padding rows of a sharded state."""
    m1, m2 = dims
    bias = {k: (v[:, : dims[BIAS_ROWS[k]]] if k in BIAS_ROWS else v) for k, v in state.bias.items()}
    return state._replace(
        m=state.m[:, :m1], V=state.V[:, :m1], n=state.n[:, :m2], W=state.W[:, :m2], bias=bias
    )


#: the parts of a :class:`VBState` that are dicts of arrays (the components' own parameters)
_DICT_PARTS = ("prior", "noise", "bias", "offsets")


def state_arrays(state: VBState) -> dict:
    """The arrays of a (one-device) VB state by name: ``state/m``, ...,
    ``state/prior/mu_M``, ``state/noise/shape``, ``state/bias/b_mean`` (absent parts are
    not written); :func:`state_from_arrays` reads them back."""
    out = {}
    for f in VBState._fields:
        v = getattr(state, f)
        if isinstance(v, dict):
            out.update({f"state/{f}/{k}": sh.to_host(x) for k, x in v.items()})
        elif v is not None:
            out[f"state/{f}"] = sh.to_host(v)
    return out


def state_from_arrays(arrays: dict, template: VBState | None = None) -> VBState:
    """Inverse of :func:`state_arrays`.  With ``template`` (a run's starting state, as when
    a checkpoint is resumed) the parts and keys are the template's, as device arrays, and a
    missing one raises ``ValueError``; without, whatever ``arrays`` holds (a saved fit)."""
    fields = {}
    for f in VBState._fields:
        pre = f"state/{f}/"
        if template is not None:
            t = getattr(template, f)
            try:
                if isinstance(t, dict):
                    fields[f] = {k: jnp.asarray(arrays[pre + k]) for k in t}
                else:
                    fields[f] = None if t is None else jnp.asarray(arrays[f"state/{f}"])
            except KeyError as err:
                raise ValueError(
                    f"the checkpoint has no VB state array {err.args[0]!r} for this model"
                ) from None
        elif f"state/{f}" in arrays:
            fields[f] = arrays[f"state/{f}"]
        else:
            sub = {k[len(pre) :]: v for k, v in arrays.items() if k.startswith(pre)}
            fields[f] = sub if f in _DICT_PARTS else None
    return VBState(**fields)
