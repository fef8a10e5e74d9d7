"""``bmc.fit(TensorData, method="vb")``: the driver of the CP model's CAVI
(:mod:`bmczoo.inference.tensor.vb`) and its result, a
:class:`~bmczoo.inference.tensor.TensorFit` of draws from q."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ...data import TensorData
from ..info import FitInfo
from . import core, vb
from .fit import TensorFit, _from_draws

__all__ = ["VB_DRAWS", "fit_tensor_vb"]

#: the number of draws from q that a VB fit keeps (its outputs' draws)
VB_DRAWS = 200


def fit_tensor_vb(
    train: TensorData,
    info: FitInfo,
    test: TensorData | None,
    progress_bar: bool,
) -> "TensorFit":
    """Closed-form mean-field VB (:class:`~bmczoo.inference.settings.VB`; the CAVI of
    :mod:`bmczoo.inference.tensor.vb`): ``restarts`` runs side by side until every run's
    relative ELBO change is below ``tol`` (or ``max_iter`` iterations), the run with the
    highest final ELBO kept (``tol=0``: ``max_iter`` iterations).  The result is a
    :class:`~bmczoo.inference.tensor.TensorFit` of :data:`VB_DRAWS` independent draws from
    q (one chain: the factors' rows, ``gamma`` from ``q(gamma)``, ``tau`` from
    ``q(tau)``), its ``losses`` the kept run's negative ELBO per iteration, its
    ``sweep_seconds`` the seconds of each iteration (the first's compilation included) and
    its ``q`` the parameters of ``q(gamma)`` (the exact rank posterior) and ``q(tau)``.

    Parameters
    ----------
    train : TensorData
        The values the model fits (centred by the caller).
    info : FitInfo
        The fit's model and settings.
    test : TensorData or None
        Held-out entries (the draws' RMSE).
    progress_bar : bool
        Show a progress bar over the iterations.
    """
    from tqdm.auto import tqdm

    s, prior, lik = info.settings, info.prior, info.likelihood
    vb.check_model(prior, lik, info.biases)
    dtype = jnp.dtype(info.dtype)
    problem = core.build_problem(train, info.tau, dtype)
    keys = jax.random.split(jax.random.key(info.seed), s.restarts)
    state = vb.init(keys, problem, prior, info.K, likelihood=lik)
    tau = jnp.asarray(info.tau, dtype)

    @jax.jit
    def step(state, problem):
        new = vb.update(state, problem, prior, tau, likelihood=lik)
        return new, vb.elbo(new, problem, prior, tau, likelihood=lik)

    trace, seconds = [], []
    for _ in tqdm(range(s.max_iter), disable=not progress_bar, desc="tensor vb"):
        t0 = time.perf_counter()
        state, e = step(state, problem)
        trace.append(np.asarray(e, np.float64))
        seconds.append(time.perf_counter() - t0)
        if (
            s.tol > 0
            and len(trace) > 1
            and np.all(np.abs(trace[-1] - trace[-2]) <= s.tol * np.abs(trace[-1]))
        ):
            break
    trace = np.stack(trace)
    best = int(np.argmax(trace[-1]))
    run = jax.tree.map(lambda x: np.asarray(x[best], np.float64), state)
    draws, q = _q_draws(run, prior, lik, np.random.default_rng(info.seed))
    fit = _from_draws(info, train, draws, test, tuple(seconds))
    fit.losses = -trace[:, best]
    fit.q = q
    return fit


def _q_draws(run, prior, lik, rng) -> tuple[dict, dict]:
    """:data:`VB_DRAWS` draws from q of one run (numpy float64, no run axis) as the NumPyro
    model's sites (one chain), and the parameters of ``q(gamma)`` (``gamma/...``) and
    ``q(tau)`` (``tau/...``)."""
    S = VB_DRAWS
    draws = {}
    for d, (m, V) in enumerate(zip(run.mean, run.cov)):
        L = np.linalg.cholesky(0.5 * (V + np.swapaxes(V, -1, -2)))
        z = rng.standard_normal((S,) + m.shape)
        draws[f"U{d}"] = (m[None] + np.einsum("ikl,sil->sik", L, z))[None]
    ES = sum(
        np.sum(m**2, 0) + np.sum(np.diagonal(V, axis1=-2, axis2=-1), 0)
        for m, V in zip(run.mean, run.cov)
    )
    rows = sum(m.shape[0] for m in run.mean)
    params = prior.vb_params(
        {"inv_gamma": jnp.asarray(run.inv_gamma)}, jnp.asarray(ES), jnp.zeros_like(ES), rows, 0
    )
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    K = ES.shape[-1]
    draws["gamma"] = np.broadcast_to(prior.q_sample(params, S, rng), (S, K))[None]
    q = {f"gamma/{k}": v for k, v in params.items()}
    if lik.learned:
        shape, rate = float(run.noise["shape"]), float(run.noise["rate"])
        draws["tau"] = rng.gamma(shape, 1.0 / rate, size=(1, S))
        q.update({"tau/shape": np.asarray(shape), "tau/rate": np.asarray(rate)})
    return draws, q
