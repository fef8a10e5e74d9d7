"""The drivers behind ``bmc.fit``: one function per settings type, ``(problem, info) -> result``.

:func:`bmczoo.inference.fit` validates the arguments, builds the model's components and
the settings object, prepares the data (:class:`Prepared`) and calls ``DRIVERS[type]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _xla
from . import settings as st
from .gibbs.state import track_entries
from .problem import Prepared, run_settings
from .results import FitInfo, GibbsFit, MAPFit, NUTSFit, SVIFit

__all__ = ["DRIVERS"]

# factor draws are stored for arbitrary-entry prediction only below this many bytes
_STORE_FACTORS_BUDGET = 256 * 2**20


def _init_gamma(s, K: int, num_chains: int, dtype):
    if s.init_gamma is None:
        return None
    g = np.asarray(s.init_gamma, np.float64)
    if g.ndim == 1 and g.shape[0] != K:
        raise ValueError(
            f"init_gamma must be a positive number or an array of K={K} of them, "
            f"got {len(g)} values"
        )
    return jnp.broadcast_to(jnp.asarray(np.broadcast_to(g, (K,)), dtype), (num_chains, K))


def _store_factors(s: st.Gibbs, shape, K: int, dtype) -> bool:
    if s.store_factors != "auto":
        return bool(s.store_factors)
    size = (
        s.num_chains
        * (s.num_samples // s.thinning)
        * (shape[0] + shape[1])
        * K
        * jnp.dtype(dtype).itemsize
    )
    return size < _STORE_FACTORS_BUDGET


def _gibbs_problem(prep: Prepared, info: FitInfo, s: st.Gibbs, track):
    from . import gibbs

    sh = info.shift
    return gibbs.build_problem(
        prep.fit_data,
        info.tau,
        dtype=info.dtype,
        entries=gibbs.Entries(
            predict=(prep.pred_rows, prep.pred_cols),
            test_values=prep.test_values,
            track=track,
            offset=sh.offset,
            clip=sh.clip,
        ),
        schedule=gibbs.Schedule(s.num_warmup, s.thinning, s.num_warmup + s.num_samples),
        options=s.sweep_options,
        mesh=s.devices,
        likelihood=info.likelihood,
        biases=info.biases,
        prior=info.prior,
    )


def _gibbs_chains(prep, info, s: st.Gibbs, track, store, gamma0, progress_bar):
    """The chains of NumPyro's ``MCMC`` with the conjugate kernel (the same keys, hence the
    same draws up to the rounding of another compilation: docs/scaling.md, "Compilation")
    run by :func:`~bmczoo.inference.checkpoint.run_gibbs`: one compiled program
    for warm-up and sampling, a progress bar with the compilation and the test RMSE, and
    the checkpoints when asked for."""
    from . import gibbs
    from .checkpoint import fingerprint, run_gibbs

    problem = _gibbs_problem(prep, info, s, track)
    key = jax.random.key(info.seed)
    keys = key[None] if s.num_chains == 1 else jax.random.split(key, s.num_chains)
    extra = {} if gamma0 is None else {"gamma": gamma0}
    if problem.mesh is None:
        # one compiled program instead of an XLA compilation per operation of the start;
        # the problem enters as constants (only its scalars and shapes are read)
        start = jax.jit(lambda k, x: gibbs.init(k, problem, info.prior, info.K, **x))
        core = _xla.compile(start.lower(keys, extra))(keys, extra)
    else:
        core = gibbs.init(keys, problem, info.prior, info.K, **extra)
    settings = run_settings(
        prep,
        info,
        num_warmup=s.num_warmup,
        num_samples=s.num_samples,
        thinning=s.thinning,
        num_chains=s.num_chains,
        track=fingerprint(*track),
        store_factors=store,
        init_gamma=None if gamma0 is None else [float(x) for x in gamma0[0]],
        overrelax=s.overrelax,
        **(
            {"column_moves": True} if s.column_moves else {}
        ),  # old checkpoints (without moves) stay valid
        **(
            {"column_moves_every": s.column_moves_every}
            if s.column_moves and s.column_moves_every > 1
            else {}
        ),
        **(
            {"anneal_steps": s.anneal_steps, "anneal_every": s.anneal_every}
            if s.anneal_steps
            else {}
        ),
    )
    timings: dict = {}
    core, samples = run_gibbs(
        core,
        problem,
        info.prior,
        store,
        num_warmup=s.num_warmup,
        num_samples=s.num_samples,
        thinning=s.thinning,
        checkpoint=s.checkpoint,
        checkpoint_every=s.checkpoint_every,
        settings=settings,
        progress_bar=progress_bar,
        timings=timings,
    )
    return core, samples, timings


def fit_gibbs(prep: Prepared, info: FitInfo, progress_bar: bool) -> GibbsFit:
    """Conjugate Gibbs (:class:`~bmczoo.inference.settings.Gibbs`)."""
    from . import gibbs

    s: st.Gibbs = info.settings
    track = track_entries(prep.train, s.track, info.seed)
    store = _store_factors(s, info.shape, info.K, info.dtype)
    gamma0 = _init_gamma(s, info.K, s.num_chains, info.dtype)
    core, samples, timings = _gibbs_chains(prep, info, s, track, store, gamma0, progress_bar)
    gibbs.check_failure(core, dtype=info.dtype)
    C = s.num_chains
    pred_sum = np.asarray(core.pred_sum, np.float64).reshape(C, -1)
    pred_sq = np.asarray(core.pred_sq, np.float64).reshape(C, -1)
    num_kept = int(np.asarray(core.num_kept).ravel()[0])
    # pooled over chains: E[theta], E[theta^2] - E[theta]^2 (running sums, no draws)
    pred_theta = pred_sum.mean(axis=0) / max(num_kept, 1)
    pred_var = np.maximum(pred_sq.mean(axis=0) / max(num_kept, 1) - pred_theta**2, 0.0)
    pred_proba, pred_mean = None, info.shift.apply(pred_theta)
    if info.likelihood.latent:  # level probabilities pooled over chains
        pred_proba = np.asarray(core.proba_sum, np.float64).reshape(
            (C,) + core.proba_sum.shape[-2:]
        ).mean(0) / max(num_kept, 1)
        pred_mean = np.asarray(info.likelihood.expected_value(pred_proba))
    # (chain, iteration); chains of a sequential run come stacked, of a single run without axis
    return GibbsFit(
        info=info,
        samples=samples,
        pred_rows=prep.pred_rows,
        pred_cols=prep.pred_cols,
        pred_mean=pred_mean,
        pred_theta=pred_theta,
        pred_var=pred_var,
        pred_proba=pred_proba,
        rmse_draw=np.asarray(core.rmse_draw).reshape(C, -1),
        rmse_mean=np.asarray(core.rmse_mean).reshape(C, -1),
        track_rows=np.asarray(track[0]),
        track_cols=np.asarray(track[1]),
        num_kept=num_kept,
        timings=timings,
        switches=np.asarray(core.switches).reshape(C, 2) if s.anneal_steps else None,
    )


def fit_nuts(prep: Prepared, info: FitInfo, progress_bar: bool) -> NUTSFit:
    """NumPyro NUTS (:class:`~bmczoo.inference.settings.NUTS`)."""
    from .baselines import run_nuts
    from .results.outputs import draws_theta_moments, flat_draws
    from .results.base import bias_draws, draws_theta_mean

    s: st.NUTS = info.settings
    track = track_entries(prep.train, s.track, info.seed)
    samples, mcmc = run_nuts(
        prep.fit_data,
        info.K,
        info.prior,
        info.likelihood,
        seed=info.seed,
        num_warmup=s.num_warmup,
        num_samples=s.num_samples,
        thinning=s.thinning,
        num_chains=s.num_chains,
        progress_bar=progress_bar,
        dtype=info.dtype,
        target_accept_prob=s.target_accept_prob,
        biases=info.biases,
    )
    M, N = samples["M"], samples["N"]
    # theta = M_i . N_j (+ row_bias_i + col_bias_j with biases), per draw
    samples["theta"] = np.sum(M[:, :, track[0]] * N[:, :, track[1]], axis=-1) + bias_draws(
        samples, *track
    )
    return NUTSFit(
        info=info,
        samples=samples,
        pred_rows=prep.pred_rows,
        pred_cols=prep.pred_cols,
        pred_mean=info.shift.apply(draws_theta_mean(samples, prep.pred_rows, prep.pred_cols)),
        pred_theta=draws_theta_mean(samples, prep.pred_rows, prep.pred_cols),
        pred_var=draws_theta_moments(flat_draws(samples, info.K), prep.pred_rows, prep.pred_cols)[
            1
        ],
        rmse_draw=np.zeros((s.num_chains, 0)),
        rmse_mean=np.zeros((s.num_chains, 0)),
        track_rows=np.asarray(track[0]),
        track_cols=np.asarray(track[1]),
        num_kept=M.shape[1],
        mcmc=mcmc,
    )


def fit_svi(prep: Prepared, info: FitInfo, progress_bar: bool) -> SVIFit:
    """NumPyro SVI (:class:`~bmczoo.inference.settings.SVI`) or MAP (``AutoDelta``)."""
    from .baselines import run_svi

    s = info.settings
    is_map = isinstance(s, st.MAP)
    draws, point, losses, guide = run_svi(
        prep.fit_data,
        info.K,
        info.prior,
        info.likelihood,
        seed=info.seed,
        guide="delta" if is_map else s.guide,
        num_steps=s.num_steps,
        learning_rate=s.learning_rate,
        subsample_size=s.subsample_size,
        num_draws=1 if is_map else s.num_draws,
        progress_bar=progress_bar,
        dtype=info.dtype,
        biases=info.biases,
    )
    cls = MAPFit if is_map else SVIFit
    return cls(info=info, draws=draws, point=point, losses=losses, guide=guide)


def _fit_vb(prep: Prepared, info: FitInfo, progress_bar: bool):
    from .vb_driver import fit_vb

    return fit_vb(prep, info, progress_bar)


#: the driver of each settings type
DRIVERS = {st.Gibbs: fit_gibbs, st.VB: _fit_vb, st.NUTS: fit_nuts, st.SVI: fit_svi, st.MAP: fit_svi}
