"""NumPyro baselines on :func:`bmczoo.models.matrix_completion`: NUTS, SVI with autoguides,
and MAP (``AutoDelta``: nuclear-norm for the fixed prior, group lasso for the gamma prior).

These use NumPyro's own machinery throughout; only the result objects are ours.
"""

from __future__ import annotations

import contextlib
import copy
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import MCMC, NUTS, SVI, Predictive, Trace_ELBO
from numpyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal

from .._checks import check_positive_int
from ..models import matrix_completion

__all__ = ["run_nuts", "run_svi", "run_mcmc_detached", "GUIDES"]

GUIDES = {
    "normal": AutoNormal,
    "lowrank": AutoLowRankMultivariateNormal,
    "delta": AutoDelta,
}


def _empty(obj) -> None:
    """Drop every attribute of ``obj`` (instance dict and slots)."""
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                delattr(obj, name)
    if hasattr(obj, "__dict__"):
        vars(obj).clear()


def run_mcmc_detached(mcmc: MCMC, rng_key, data, *args, **kwargs) -> MCMC:
    """``mcmc.run(rng_key, data, *args, **kwargs)``; returns a copy of ``mcmc`` holding the
    run (samples, last state, kernel, model arguments) and empties ``mcmc``, its kernel and
    the alias of ``data`` that the run saw.

    NumPyro keeps the functions built by a run in process-wide caches that outlive the run
    and the MCMC object (``numpyro.util.cached_by`` on ``fori_collect`` and
    ``_collect_and_postprocess``, and JAX's jit caches, where ``fori_collect``'s loop body
    is a static argument).  Those functions close over the MCMC object (whose last state
    carries the problem's device arrays), its kernel and the model arguments (the
    ratings): every fit left its data and state alive.  Emptied, they keep empty shells.
    """
    alias = copy.copy(data)  # shares the arrays
    try:
        mcmc.run(rng_key, alias, *args, **kwargs)
        out = copy.copy(mcmc)  # MCMC.__getstate__ leaves out its function cache
        out.sampler = copy.copy(mcmc.sampler)
        out._args = (data, *mcmc._args[1:])
        # what the run cached on the data (its index views) stays on data, as without the alias
        for name, value in vars(alias).items():
            vars(data).setdefault(name, value)
        return out
    finally:
        for obj in (mcmc.sampler, mcmc, alias):
            _empty(obj)


def _x64_context(dtype):
    """float64 runs under ``jax.enable_x64`` (NumPyro samples in the default float dtype)."""
    return jax.enable_x64(True) if jnp.dtype(dtype) == jnp.float64 else contextlib.nullcontext()


def run_nuts(
    data,
    K,
    prior,
    likelihood,
    *,
    seed,
    num_warmup,
    num_samples,
    thinning,
    num_chains,
    progress_bar,
    dtype,
    chain_method="sequential",
    target_accept_prob=0.8,
    biases=None,
    init_params=None,
):
    """NUTS on the NumPyro model; returns the grouped samples (chain, draw, ...) and the MCMC.
    ``biases``: the model's :class:`~bmczoo.offsets.Biases` component or None.
    ``init_params``: where the chains start, NumPyro's ``MCMC.run(init_params=...)``: a dict
    of the model's sample sites in their unconstrained space (``{"M": (num_chains, m1, K),
    "N": (num_chains, m2, K)}``; without a chain axis for one chain); None: NumPyro's
    default (``init_to_uniform``)."""
    with _x64_context(dtype):
        mcmc = MCMC(
            NUTS(matrix_completion, target_accept_prob=target_accept_prob),
            num_warmup=num_warmup,
            num_samples=num_samples,
            thinning=thinning,
            num_chains=num_chains,
            chain_method=chain_method,
            progress_bar=progress_bar,
        )
        if init_params is not None:
            init_params = {k: jnp.asarray(v, dtype) for k, v in init_params.items()}
        mcmc = run_mcmc_detached(
            mcmc,
            jax.random.key(seed),
            data,
            K,
            prior,
            likelihood=likelihood,
            biases=biases,
            init_params=init_params,
        )
        samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return samples, mcmc


def run_svi(
    data,
    K,
    prior,
    likelihood,
    *,
    seed,
    guide="normal",
    num_steps=2000,
    learning_rate=0.05,
    decay=0.1,
    subsample_size=None,
    num_draws=100,
    progress_bar=True,
    dtype=jnp.float32,
    biases=None,
):
    """SVI with a NumPyro autoguide and Adam on an exponentially decaying step size
    (``learning_rate`` decays to ``decay * learning_rate`` over ``num_steps``).

    Returns ``(draws, point, losses, guide)``: ``draws`` are ``num_draws`` samples of the
    latent sites from the fitted guide (one for ``AutoDelta``); ``point`` holds the
    factors to predict with: for the mean-field ``AutoNormal`` and for ``AutoDelta`` the
    guide's medians, with which ``E_q[M_i . N_j] = E_q[M_i] . E_q[N_j]`` exactly, else
    ``None`` (predict by averaging over ``draws``).  ``biases``: the model's
    :class:`~bmczoo.offsets.Biases` component or None (its ``row_bias``/``col_bias`` are
    among the draws and the point).
    """
    if guide not in GUIDES:
        raise ValueError(f"guide must be one of {sorted(GUIDES)}, got {guide!r}")
    num_steps = check_positive_int("num_steps", num_steps)
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if subsample_size > data.n:
            raise ValueError(
                f"subsample_size={subsample_size} exceeds the number of ratings {data.n}"
            )
    # MAP is the paper's: gamma integrated out (joint MAP over gamma degenerates at gamma -> 0)
    model = partial(
        matrix_completion,
        likelihood=likelihood,
        biases=biases,
        subsample_size=subsample_size,
        marginal=guide == "delta",
    )
    with _x64_context(dtype):
        g = GUIDES[guide](model)
        schedule = optax.exponential_decay(learning_rate, num_steps, decay)
        svi = SVI(model, g, optax.adam(schedule), Trace_ELBO())
        key_fit, key_draw = jax.random.split(jax.random.key(seed))
        result = svi.run(key_fit, num_steps, data, K, prior, progress_bar=progress_bar)
        n_draws = 1 if guide == "delta" else check_positive_int("num_draws", num_draws)
        pred = Predictive(g, params=result.params, num_samples=n_draws)
        draws = {k: np.asarray(v) for k, v in pred(key_draw, data, K, prior).items()}
        point = None
        if guide in ("normal", "delta"):
            point = {k: np.asarray(v) for k, v in g.median(result.params).items()}
    return draws, point, np.asarray(result.losses), g
