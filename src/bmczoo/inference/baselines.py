"""NumPyro baselines on :func:`bmczoo.models.matrix_completion`: NUTS, SVI with autoguides,
and MAP (``AutoDelta``: nuclear-norm for the fixed prior, group lasso for the gamma prior).

These use NumPyro's own machinery throughout; only the result objects are ours.
:func:`fit_nuts`, :func:`fit_svi` and :func:`fit_map` are the drivers of ``bmc.fit``
(``(prepared data, info, progress_bar) -> result``); :func:`run_nuts` and
:func:`run_svi` run NumPyro for them from the fit's info and settings objects.
"""

from __future__ import annotations

import copy
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import MCMC, NUTS, SVI, Predictive, Trace_ELBO
from numpyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal, AutoNormal

from .._checks import check_positive_int, x64_context
from ..models import matrix_completion
from . import settings as st
from .results.outputs import draws_theta_moments, flat_draws
from .problem import Prepared, track_entries
from .info import FitInfo
from .results import MAPFit, NUTSFit, SVIFit
from .results.base import bias_draws, draws_theta_mean
from .results.mcmc import _offset_draws
from .gibbs.per_rating import _positions
from ..offsets.base import table_key

__all__ = [
    "GUIDES",
    "fit_map",
    "fit_nuts",
    "fit_svi",
    "run_mcmc_detached",
    "run_nuts",
    "run_svi",
    "x64_context",
]

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


def run_nuts(
    data,
    info: FitInfo,
    s: st.NUTS,
    *,
    progress_bar: bool = True,
    chain_method: str = "sequential",
    init_params: dict | None = None,
):
    """NUTS on the NumPyro model of ``info`` (K, prior, likelihood, biases, seed, dtype)
    with the chains of ``s``; returns the grouped samples (chain, draw, ...) and the MCMC.
    ``init_params``: where the chains start, NumPyro's ``MCMC.run(init_params=...)``: a dict
    of the model's sample sites in their unconstrained space (``{"M": (num_chains, m1, K),
    "N": (num_chains, m2, K)}``; without a chain axis for one chain); None: NumPyro's
    default (``init_to_uniform``)."""
    with x64_context(info.dtype):
        mcmc = MCMC(
            NUTS(matrix_completion, target_accept_prob=s.target_accept_prob),
            num_warmup=s.num_warmup,
            num_samples=s.num_samples,
            thinning=s.thinning,
            num_chains=s.num_chains,
            chain_method=chain_method,
            progress_bar=progress_bar,
        )
        if init_params is not None:
            init_params = {k: jnp.asarray(v, info.dtype) for k, v in init_params.items()}
        mcmc = run_mcmc_detached(
            mcmc,
            jax.random.key(info.seed),
            data,
            info.K,
            info.prior,
            likelihood=info.likelihood,
            biases=info.biases,
            offsets=getattr(info, "offsets", ()),
            init_params=init_params,
        )
        samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return samples, mcmc


def run_svi(
    data,
    info: FitInfo,
    s: st.SVI | st.MAP,
    guide: str = "normal",
    *,
    progress_bar: bool = True,
    decay: float = 0.1,
    model=matrix_completion,
):
    """SVI with a NumPyro autoguide (``guide``: a key of :data:`GUIDES`) on the model of
    ``info`` (``model``: :func:`~bmczoo.models.matrix_completion`, or another NumPyro model
    with its signature ``model(data, K, prior, *, likelihood, biases, subsample_size,
    marginal)``, e.g. :func:`~bmczoo.models.tensor_completion.tensor_completion`), and Adam on an exponentially decaying step size (``s.learning_rate`` decays to
    ``decay * s.learning_rate`` over ``s.num_steps``, minibatches of ``s.subsample_size``).

    Returns ``(draws, point, losses, guide)``: ``draws`` are ``s.num_draws`` samples of
    the latent sites from the fitted guide (one for ``AutoDelta``); ``point`` holds the
    factors to predict with: for the mean-field ``AutoNormal`` and for ``AutoDelta`` the
    guide's medians, with which ``E_q[M_i . N_j] = E_q[M_i] . E_q[N_j]`` exactly, else
    ``None`` (predict by averaging over ``draws``).  With biases (``info.biases``) their
    ``row_bias``/``col_bias`` are among the draws and the point.
    """
    if guide not in GUIDES:
        raise ValueError(f"guide must be one of {sorted(GUIDES)}, got {guide!r}")
    num_steps = check_positive_int("num_steps", s.num_steps)
    subsample_size = s.subsample_size
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if subsample_size > data.n:
            raise ValueError(
                f"subsample_size={subsample_size} exceeds the number of ratings {data.n}"
            )
    # MAP is the paper's: gamma integrated out (joint MAP over gamma degenerates at gamma -> 0)
    model = partial(
        model,
        likelihood=info.likelihood,
        biases=info.biases,
        subsample_size=subsample_size,
        marginal=guide == "delta",
    )
    K, prior = info.K, info.prior
    with x64_context(info.dtype):
        g = GUIDES[guide](model)
        schedule = optax.exponential_decay(s.learning_rate, num_steps, decay)
        svi = SVI(model, g, optax.adam(schedule), Trace_ELBO())
        key_fit, key_draw = jax.random.split(jax.random.key(info.seed))
        result = svi.run(key_fit, num_steps, data, K, prior, progress_bar=progress_bar)
        n_draws = 1 if guide == "delta" else check_positive_int("num_draws", s.num_draws)
        pred = Predictive(g, params=result.params, num_samples=n_draws)
        draws = {k: np.asarray(v) for k, v in pred(key_draw, data, K, prior).items()}
        point = None
        if guide in ("normal", "delta"):
            point = {k: np.asarray(v) for k, v in g.median(result.params).items()}
    return draws, point, np.asarray(result.losses), g


def fit_nuts(prep: Prepared, info: FitInfo, progress_bar: bool) -> NUTSFit:
    """NumPyro NUTS (:class:`~bmczoo.inference.settings.NUTS`)."""
    s: st.NUTS = info.settings
    track = track_entries(prep.train, s.track, info.seed)
    samples, mcmc = run_nuts(prep.fit_data, info, s, progress_bar=progress_bar)
    M, N = samples["M"], samples["N"]
    # theta = M_i . N_j (+ row_bias_i + col_bias_j with biases), per draw
    samples["theta"] = np.sum(M[:, :, track[0]] * N[:, :, track[1]], axis=-1) + bias_draws(
        samples, *track
    )
    flat = flat_draws(samples, info.K)
    if info.offsets:  # theta + s at the tracked ratings and at the test ratings' context
        samples["theta"] = samples["theta"] + _tracked_offsets(prep, info, samples, track)
        if prep.context is not None:
            flat["entry_shift"] = _offset_draws(info, samples, prep.context)
        pred_theta = draws_theta_moments(flat, prep.pred_rows, prep.pred_cols)[0]
    else:
        pred_theta = draws_theta_mean(samples, prep.pred_rows, prep.pred_cols)
    return NUTSFit(
        info=info,
        samples=samples,
        pred_rows=prep.pred_rows,
        pred_cols=prep.pred_cols,
        pred_mean=info.shift.apply(pred_theta),
        pred_theta=pred_theta,
        pred_var=draws_theta_moments(flat, prep.pred_rows, prep.pred_cols)[1],
        rmse_draw=np.zeros((s.num_chains, 0)),
        rmse_mean=np.zeros((s.num_chains, 0)),
        track_rows=np.asarray(track[0]),
        track_cols=np.asarray(track[1]),
        num_kept=M.shape[1],
        mcmc=mcmc,
        pred_context=table_key(prep.context) if info.offsets else None,
    )


def _tracked_offsets(prep: Prepared, info: FitInfo, samples: dict, track) -> np.ndarray:
    """The sampled offsets' draws (C, D, E) at the tracked ratings (their per-rating table
    taken from the training ratings')."""
    C, D = np.shape(samples["M"])[:2]
    train = prep.fit_data
    pos = _positions(train, track[0], track[1], "a tracked")
    shift = _offset_draws(info, samples, train.context.take(pos))
    return shift(0, pos.size).reshape(C, D, pos.size)


def fit_svi(prep: Prepared, info: FitInfo, progress_bar: bool) -> SVIFit:
    """NumPyro SVI (:class:`~bmczoo.inference.settings.SVI`) with the settings' autoguide."""
    s: st.SVI = info.settings
    draws, point, losses, guide = run_svi(
        prep.fit_data, info, s, s.guide, progress_bar=progress_bar
    )
    return SVIFit(info=info, draws=draws, point=point, losses=losses, guide=guide)


def fit_map(prep: Prepared, info: FitInfo, progress_bar: bool) -> MAPFit:
    """MAP (:class:`~bmczoo.inference.settings.MAP`): SVI with ``AutoDelta``."""
    draws, point, losses, guide = run_svi(
        prep.fit_data, info, info.settings, "delta", progress_bar=progress_bar
    )
    return MAPFit(info=info, draws=draws, point=point, losses=losses, guide=guide)
