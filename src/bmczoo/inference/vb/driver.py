"""The VB driver of ``bmc.fit``: iterate CAVI to convergence, with traces and checkpoints.

The iteration itself is :mod:`bmczoo.inference.vb` (one body for one device and for a
mesh); this module runs it from ``VB.restarts`` random starts side by side (the *runs*:
the leading axis of the state), records the ELBO and the test RMSE of each run per
iteration, stops on the relative ELBO change, saves and resumes checkpoints through
:func:`bmczoo.inference.run.run_loop`, and returns a
:class:`~bmczoo.inference.results.VBFit` of the run with the highest final ELBO.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from ... import _xla
from ...likelihoods import Likelihood
from ...priors.macau.arrays import shared_link_arrays
from ..checkpoint import check_settings, load_npz, save_npz
from ..gibbs import build_problem
from ..results.levels import level_log_probs_np
from ..problem import Prepared, run_settings
from ..info import FitInfo, no_gamma
from ..results import VBFit
from ..run import Job, run_loop
from ..sharding import put, to_host
from .cavi import update
from . import all_pairs
from . import offsets as vbo
from .elbo import elbo
from .state import (
    BIAS_LINKS,
    Sharded,
    VBState,
    check_bias_links,
    check_links,
    init,
    prior_q,
    shard_state,
    state_arrays,
    state_from_arrays,
    unshard_state,
    vb_prior,
)

__all__ = ["fit_vb"]


class _Data(NamedTuple):
    """The arrays an iteration reads: the ratings by rows and by columns, the likelihood
    precision, the test entries, a latent likelihood's ``(levels, col_perm)``, a
    prior's and the biases' feature links (the biases' under ``biases/``) and the sampled
    offsets' arrays at the ratings (row order) and at the test entries."""

    rows: Any
    cols: Any
    tau: Any
    test_rows: Any
    test_cols: Any
    latent: Any
    links: dict
    offsets: tuple = ()
    test_offsets: tuple = ()


def per_rating(likelihood) -> bool:
    """Whether the likelihood has a per-rating block (latent or weighted): its VB update
    reads ``(levels, col_perm)``."""
    return likelihood.latent or likelihood.weighted


def _iterate(state: VBState, data: _Data, *, prior, likelihood, biases, sharded, offsets=()):
    # jitted once per fit (_Runs.compile) with the problem as an argument: no array is baked
    # into the compiled program, and the program is dropped with the fit (a module-level
    # jit would keep one compiled program per prior and shape for the life of the process)
    kw = dict(
        likelihood=likelihood,
        biases=biases,
        sharded=sharded,
        latent=(
            data.latent if offsets or (likelihood is not None and per_rating(likelihood)) else None
        ),
        links=data.links,
        offsets=tuple(zip(offsets, data.offsets)),
    )
    state = update(state, data.rows, data.cols, prior, data.tau, **kw)
    pred = jnp.sum(state.m[:, data.test_rows] * state.n[:, data.test_cols], axis=-1)
    if state.bias:  # E[theta_ij] = m_i . n_j + E[b_i] + E[c_j]
        pred = (
            pred + state.bias["b_mean"][:, data.test_rows] + state.bias["c_mean"][:, data.test_cols]
        )
    if offsets and data.test_offsets:  # plus E[s] at the test ratings' context
        pred = pred + vbo.moments(offsets, state.offsets, data.test_offsets)[0]
    return state, elbo(state, data.rows, prior, data.tau, **kw), pred


def _vb_failure(state, iteration: int, dtype) -> str:
    """Message naming the first row whose variational factor is not finite."""
    where = ""
    for name, arr in (("M", state.m), ("N", state.n), ("M", state.V), ("N", state.W)):
        bad = ~np.isfinite(to_host(arr)).reshape(arr.shape[0], arr.shape[1], -1).all(axis=-1)
        if bad.any():
            c, row = np.argwhere(bad)[0]
            where = f" (first at row {row} of {name}, run {c}: its Cholesky factorisation failed or overflowed)"
            break
    dt = jnp.dtype(dtype).name
    hint = (
        "try dtype=jnp.float64" if dt != "float64" else "check the data scale and hyper-parameters"
    )
    return f"VB produced a non-finite ELBO at iteration {iteration}{where} in {dt}; {hint}"


def _described(component) -> dict:
    return {
        k: (float(v) if isinstance(v, (int, float)) else v) for k, v in component.describe().items()
    }


def _checkpoint_settings(prep: Prepared, info: FitInfo) -> dict:
    """What identifies a VB run for its checkpoint.  VB is deterministic after its start: a
    checkpoint can be continued with another ``max_iter`` or ``tol``, so those are not
    part of it; the likelihood and the biases only when the model has them (the paper's
    model keeps its settings)."""
    extra = {}
    if info.likelihood.learned or info.likelihood.latent or info.likelihood.all_pairs:
        extra["likelihood"] = _described(info.likelihood)
    if info.biases is not None:
        extra["biases"] = _described(info.biases)
    return run_settings(prep, info, num_runs=info.settings.restarts, **extra)


def _links(prep: Prepared, info: FitInfo, sharded: Sharded | None) -> dict:
    """The arrays of a prior's feature links (docs/algorithms.md, "Feature links (side
    information)"): arguments of the jitted iteration, built from the fitted ratings as
    for Gibbs (one device: :func:`~bmczoo.inference.vb.state.check_links`)."""
    if not getattr(info.prior, "linked_sides", ()):
        return {}
    links = info.prior.gibbs_links(prep.fit_data, info.dtype)
    check_links(info.prior, links, sharded)
    return links


def _bias_links(prep: Prepared, info: FitInfo, sharded: Sharded | None) -> dict:
    """The arrays of the biases' feature links (empty without them; one device)."""
    if info.biases is None or not info.biases.linked_sides:
        return {}
    links = info.biases.gibbs_links(prep.fit_data, info.dtype)
    check_bias_links(info.biases, links, sharded)
    return links


def _start(info: FitInfo, problem, links: dict, bias_links: dict) -> VBState:
    """The runs' starting state: run r from key ``split(key(seed), R)[r]`` (with one run
    the key itself); learned cut points start at the data's quantiles."""
    runs = info.settings.restarts
    key = jax.random.key(info.seed)
    keys = key[None] if runs == 1 else jax.random.split(key, runs)
    state = init(
        keys,
        info.shape,
        info.prior,
        info.K,
        info.dtype,
        likelihood=info.likelihood,
        biases=check_bias_links(info.biases, bias_links, None),
        links=links,
    )
    if info.offsets:
        arrays = problem.offset_arrays["ratings"]
        state = state._replace(offsets=vbo.init(info.offsets, arrays, runs, info.dtype))
    lik = info.likelihood
    if lik.latent and lik.fixed_cuts() is None:
        cuts0 = lik.init_cuts(np.asarray(problem.levels))
        cuts = jnp.broadcast_to(jnp.asarray(cuts0, info.dtype), (runs, cuts0.size))
        state = state._replace(noise={"cuts": cuts})
    return state


def _test_offsets(prep: Prepared, info: FitInfo, n_test: int) -> tuple:
    """The sampled offsets' arrays at the test ratings (from their per-rating table), for
    the RMSE trace (empty without offsets or test ratings)."""
    if not info.offsets or not n_test:
        return ()
    return tuple(o.arrays(prep.context, n_test, info.dtype) for o in info.offsets)


class _Runs(Job):
    """The runs of one VB fit as :func:`~bmczoo.inference.run.run_loop` drives them: one
    CAVI iteration per call, their state, ELBO and test-RMSE traces, and checkpoint."""

    unit = "it"

    def __init__(self, prep: Prepared, info: FitInfo):
        s = info.settings
        self.prep, self.info, self.s = prep, info, s
        self.total, self.num_runs = s.max_iter, s.restarts
        self.dims = tuple(info.shape)
        self.sharded = None if s.devices is None else Sharded(s.devices, self.dims)
        self.problem = build_problem(
            prep.fit_data,
            info.tau,
            dtype=info.dtype,
            mesh=s.devices,
            likelihood=info.likelihood if per_rating(info.likelihood) else None,
            offsets=info.offsets,
        )
        with shared_link_arrays():  # a table linked by the prior and the biases: once
            self.links = _links(prep, info, self.sharded)
            self.bias_links = _bias_links(prep, info, self.sharded)
        self.state = self.shard(_start(info, self.problem, self.links, self.bias_links))
        n_test = prep.test_values.shape[0]
        test_rc = [jnp.asarray(x[:n_test]) for x in (prep.pred_rows, prep.pred_cols)]
        if s.devices is not None:
            rep = NamedSharding(s.devices, PartitionSpec())
            test_rc = [put(x, rep) for x in test_rc]
        p = self.problem
        links = {**self.links, **{BIAS_LINKS + k: v for k, v in self.bias_links.items()}}
        self.data = _Data(
            p.rows,
            p.cols,
            p.tau,
            *test_rc,
            (p.levels, p.col_perm),
            links,
            p.offset_arrays.get("ratings", ()),
            _test_offsets(prep, info, n_test),
        )
        self.compiled, self.compile_seconds = None, 0.0
        self.elbos, self.rmses, self.seconds, self.converged = [], [], [], False
        self.settings = _checkpoint_settings(prep, info)

    def shard(self, state):
        return state if self.sharded is None else shard_state(state, self.sharded.mesh)

    def unshard(self, state):
        return state if self.sharded is None else unshard_state(state, self.dims)

    def is_converged(self) -> bool:
        e = self.elbos
        return len(e) > 1 and bool(np.all(np.abs(e[-1] - e[-2]) <= self.s.tol * np.abs(e[-1])))

    def resume(self) -> None:
        ckpt = self.s.checkpoint
        if ckpt is None or not os.path.exists(ckpt):
            return
        stored, arrays = load_npz(ckpt)
        check_settings(ckpt, stored, self.settings)
        self.state = self.shard(state_from_arrays(arrays, self.unshard(self.state)))
        self.elbos, self.rmses = list(arrays["elbo"]), list(arrays["rmse"])
        self.converged = self.is_converged()

    def done(self) -> int:
        return len(self.elbos)

    def pending(self) -> bool:
        return len(self.elbos) < self.total and not self.converged

    def compile(self) -> None:
        if not self.pending():
            return
        info = self.info
        iterate = jax.jit(
            functools.partial(
                _iterate,
                prior=info.prior,
                likelihood=info.likelihood,
                biases=info.biases,
                sharded=self.sharded,
                offsets=info.offsets,
            )
        )
        # compiled once, with bmczoo's options, for every iteration
        t0 = time.perf_counter()
        self.compiled = _xla.compile(iterate.lower(self.state, self.data))
        self.compile_seconds = time.perf_counter() - t0

    def advance(self, n: int) -> None:
        t0 = time.perf_counter()
        new_state, e, pred = self.compiled(self.state, self.data)
        e = np.asarray(e, np.float64)
        # the compilation counts in the first iteration of this call
        seconds = time.perf_counter() - t0 + (0.0 if self.seconds else self.compile_seconds)
        self.seconds.append(seconds)
        if not np.all(np.isfinite(e)):
            raise FloatingPointError(_vb_failure(new_state, len(self.elbos) + 1, self.info.dtype))
        r = []
        if self.prep.test_values.shape[0]:
            y = self._predicted(new_state, np.asarray(pred, np.float64))
            r = [np.sqrt(np.mean((y - self.prep.test_values) ** 2, axis=-1))]
        # one assignment: a Ctrl-C (delivered between bytecodes that check for signals,
        # not inside an unpacking) cannot separate the state from its traces
        self.state, self.elbos, self.rmses = new_state, self.elbos + [e], self.rmses + r
        self.converged = self.is_converged()

    def _predicted(self, state, theta_mean) -> np.ndarray:
        """Data-scale predictions at the test entries: the shifted mean of theta, or for a
        latent likelihood the expected level (theta's q-variance ignored in the trace)."""
        lik = self.info.likelihood
        if not lik.latent:
            return self.info.shift.apply(theta_mean)
        cuts = (
            np.asarray(state.noise["cuts"], np.float64)
            if "cuts" in state.noise
            else np.broadcast_to(
                np.asarray(lik.fixed_cuts(), np.float64),
                (theta_mean.shape[0], len(lik.fixed_cuts())),
            )
        )
        probs = np.exp(level_log_probs_np(theta_mean, cuts[:, None, :]))
        return probs @ np.asarray(lik.level_values, np.float64)

    def phase(self, it: int) -> str:
        return "vb"

    def postfix(self, n: int, seconds: float) -> dict:
        post = {"elbo": f"{self.elbos[-1].max():.6g}"}
        if self.rmses:
            post["rmse"] = f"{self.rmses[-1].min():.4f}"
        return post

    def save(self) -> None:
        R = self.num_runs
        arrays = state_arrays(self.unshard(self.state))
        arrays["elbo"] = np.asarray(self.elbos, np.float64).reshape(len(self.elbos), R)
        arrays["rmse"] = np.asarray(self.rmses, np.float64).reshape(len(self.rmses), R)
        save_npz(self.s.checkpoint, self.settings, arrays)

    def describe(self) -> str:
        return f"{len(self.elbos)} VB iterations"


def _best(runs: _Runs) -> tuple[int, VBState]:
    """The run with the highest final ELBO and its state, on one device (gathered from
    every process), without the padding rows."""
    best = int(np.argmax(runs.elbos[-1]))
    state = runs.state
    if runs.sharded is not None:
        state = jax.tree.map(lambda x: jnp.asarray(to_host(x)), runs.unshard(state))
    return best, jax.tree.map(lambda x: x[best : best + 1], state)


def fit_vb(prep: Prepared, info: FitInfo, progress_bar: bool) -> VBFit:
    """Closed-form mean-field VB (:class:`~bmczoo.inference.settings.VB`)."""
    lik = info.likelihood
    if lik.weighted and type(lik).vb_weights is Likelihood.vb_weights:
        raise ValueError(
            f"method='vb' has no update for the {lik.name} likelihood's per-rating weights: "
            "use method='gibbs' (or 'nuts', 'svi', 'map')"
        )
    vbo.check_vb_offsets(info.offsets)
    devices = info.settings.devices
    all_pairs.check_support(lik, biases=info.biases, sharded=devices, offsets=info.offsets)
    runs = _Runs(prep, info)
    runs.resume()
    run_loop(runs, info.settings.checkpoint, info.settings.checkpoint_every, progress_bar)
    best, state = _best(runs)
    prior, (m1, m2) = vb_prior(info.prior, runs.links), info.shape
    qp = prior_q(state)
    stats_M, stats_N = (
        prior.vb_factor_stats(state.m, state.V),
        prior.vb_factor_stats(state.n, state.W),
    )
    one = lambda d: {k: np.asarray(v)[0] for k, v in d.items()}  # noqa: E731
    q_prior = one(prior.vb_params(qp, stats_M, stats_N, m1, m2))
    q_noise = one(info.likelihood.vb_params(state.noise)) if state.noise else {}
    bias = one(state.bias) if state.bias else {}
    for s, label in (("b", "row"), ("c", "col")):  # E[w] of feature-driven biases (fold-in)
        if f"{s}w_mean" in bias:
            bias[f"{s}w"] = np.asarray(runs.bias_links[f"{label}/V"]) @ bias[f"{s}w_mean"]
    return VBFit(
        info=info,
        m=np.asarray(state.m[0]),
        n=np.asarray(state.n[0]),
        V_diag=np.asarray(jnp.diagonal(state.V[0], axis1=-2, axis2=-1)),
        W_diag=np.asarray(jnp.diagonal(state.W[0], axis1=-2, axis2=-1)),
        q_gamma=q_prior if prior.has_column_scales else no_gamma(prior),
        q_prior=q_prior,
        q_noise=q_noise,
        q_biases=bias,
        q_offsets=one(state.offsets) if state.offsets else {},
        row_bias=bias.get("b_mean"),
        col_bias=bias.get("c_mean"),
        elbo=np.asarray([e[best] for e in runs.elbos]),
        rmse_trace=np.asarray([r[best] for r in runs.rmses]),
        converged=runs.converged,
        state=state,
        num_iter=len(runs.elbos),
        best_run=best,
        # wall seconds of each iteration run by this call (the first includes compilation)
        iteration_seconds=tuple(runs.seconds),
        final_elbo_per_run=tuple(float(x) for x in runs.elbos[-1]),
    )
