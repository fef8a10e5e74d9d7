"""The VB driver of ``bmc.fit``: iterate CAVI to convergence, with traces and checkpoints.

The iteration itself is :mod:`bmczoo.inference.vb` (one body for one device and for a
mesh); this module runs it from ``restarts`` random starts side by side, records the
ELBO and the test RMSE per iteration, stops on the relative ELBO change, saves and
resumes checkpoints, and returns a :class:`~bmczoo.inference.results.VBFit` of the run
with the highest final ELBO.
"""

from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from .. import _xla
from . import vb
from .problem import run_settings
from .info import no_gamma
from .results import VBFit
from .sharding import put, to_host

__all__ = ["fit_vb"]


def _iterate(
    state,
    rows,
    cols,
    tau,
    test_rows,
    test_cols,
    latent,
    links,
    *,
    prior,
    likelihood,
    biases,
    mesh,
    dims,
):
    # jitted once per fit (_Run.iterate) with the problem as arguments: no array is baked
    # into the compiled program, and the program is dropped with the fit (a module-level
    # jit would keep one compiled program per prior and shape for the life of the process)
    kw = dict(
        likelihood=likelihood,
        biases=biases,
        mesh=mesh,
        dims=dims,
        latent=latent if (likelihood is not None and likelihood.latent) else None,
        links=links,
    )
    state = vb.update(state, rows, cols, prior, tau, **kw)
    pred = jnp.sum(state.m[:, test_rows] * state.n[:, test_cols], axis=-1)
    if state.bias:  # E[theta_ij] = m_i . n_j + E[b_i] + E[c_j]
        pred = pred + state.bias["b_mean"][:, test_rows] + state.bias["c_mean"][:, test_cols]
    return state, vb.elbo(state, rows, prior, tau, **kw), pred


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


class _Run:
    """The mutable part of one VB run: state, traces, checkpoint file."""

    def __init__(self, prep, info):
        from .gibbs import build_problem

        s = info.settings
        self.prep, self.info, self.s = prep, info, s
        self.mesh, self.dims = s.devices, tuple(info.shape)
        latent = info.likelihood.latent
        self.problem = build_problem(
            prep.fit_data,
            info.tau,
            dtype=info.dtype,
            mesh=s.devices,
            likelihood=info.likelihood if latent else None,
        )
        # a prior's feature links (docs/algorithms.md, "Feature links (side information)"):
        # their arrays are arguments of the jitted iteration, built from the fitted ratings
        # as for Gibbs
        self.links = {}
        if getattr(info.prior, "linked_sides", ()):
            if s.devices is not None:
                raise ValueError(
                    f"{info.prior.name} with feature links runs on one device: its sharded VB update "
                    "is not implemented (drop devices=)"
                )
            self.links = info.prior.gibbs_links(prep.fit_data, info.dtype)
        # run r starts from key split(key(seed), C)[r]; with C = 1 the key itself
        key = jax.random.key(info.seed)
        keys = key[None] if s.restarts == 1 else jax.random.split(key, s.restarts)
        state = vb.init(
            keys,
            info.shape,
            info.prior,
            info.K,
            info.dtype,
            likelihood=info.likelihood,
            biases=info.biases,
            links=self.links,
        )
        if (
            latent and info.likelihood.fixed_cuts() is None
        ):  # learned cut points start at the data's quantiles
            cuts0 = info.likelihood.init_cuts(np.asarray(self.problem.levels))
            state = state._replace(
                noise={
                    "cuts": jnp.broadcast_to(
                        jnp.asarray(cuts0, info.dtype), (s.restarts, cuts0.size)
                    )
                }
            )
        self.state = self.shard(state)
        n_test = prep.test_values.shape[0]
        self.test_rc = [jnp.asarray(x[:n_test]) for x in (prep.pred_rows, prep.pred_cols)]
        if self.mesh is not None:
            rep = NamedSharding(self.mesh, PartitionSpec())
            self.test_rc = [put(x, rep) for x in self.test_rc]
        self.compiled = None
        self.iterate = jax.jit(
            functools.partial(
                _iterate,
                prior=info.prior,
                likelihood=info.likelihood,
                biases=info.biases,
                mesh=self.mesh,
                dims=self.dims,
            )
        )
        self.elbos, self.rmses, self.seconds, self.converged = [], [], [], False
        # VB is deterministic after its start: a checkpoint can be continued with another
        # max_iter or tol, so those are not part of the settings
        # the model's other components only when present: checkpoints of the paper's
        # model keep their settings
        extra = {}
        if info.likelihood.learned or latent:
            extra["likelihood"] = {
                k: (float(v) if isinstance(v, (int, float)) else v)
                for k, v in info.likelihood.describe().items()
            }
        if info.biases is not None:
            extra["biases"] = {
                k: (float(v) if isinstance(v, (int, float)) else v)
                for k, v in info.biases.describe().items()
            }
        self.settings = run_settings(prep, info, num_runs=s.restarts, **extra)

    def shard(self, state):
        return state if self.mesh is None else vb.shard_state(state, self.mesh)

    def unshard(self, state):
        return state if self.mesh is None else vb.unshard_state(state, self.dims)

    def is_converged(self) -> bool:
        e = self.elbos
        return len(e) > 1 and bool(np.all(np.abs(e[-1] - e[-2]) <= self.s.tol * np.abs(e[-1])))

    def resume(self):
        from .checkpoint import check_settings, load_npz

        ckpt = self.s.checkpoint
        if ckpt is None or not os.path.exists(ckpt):
            return
        stored, arrays = load_npz(ckpt)
        check_settings(ckpt, stored, self.settings)
        self.state = self.shard(vb.state_from_arrays(arrays, self.unshard(self.state)))
        self.elbos, self.rmses = list(arrays["elbo"]), list(arrays["rmse"])
        self.converged = self.is_converged()

    def save(self):
        from .checkpoint import save_npz

        R = self.s.restarts
        arrays = vb.state_arrays(self.unshard(self.state))
        arrays["elbo"] = np.asarray(self.elbos, np.float64).reshape(len(self.elbos), R)
        arrays["rmse"] = np.asarray(self.rmses, np.float64).reshape(len(self.rmses), R)
        save_npz(self.s.checkpoint, self.settings, arrays)

    def one_iteration(self):
        t0 = time.perf_counter()
        p = self.problem
        args = (
            self.state,
            p.rows,
            p.cols,
            p.tau,
            *self.test_rc,
            (p.levels, p.col_perm),
            self.links,
        )
        if self.compiled is None:  # compiled once, with bmczoo's options, for every iteration
            self.compiled = _xla.compile(self.iterate.lower(*args))
        new_state, e, pred = self.compiled(*args)
        e = np.asarray(e, np.float64)
        self.seconds.append(time.perf_counter() - t0)
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
        from .results.levels import level_log_probs_np

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

    def loop(self, progress_bar: bool):
        from .checkpoint import STOP

        s = self.s
        with tqdm(
            total=s.max_iter, initial=len(self.elbos), disable=not progress_bar, desc="vb"
        ) as bar:
            try:
                while len(self.elbos) < s.max_iter and not self.converged:
                    self.one_iteration()
                    if (
                        s.checkpoint is not None
                    ):  # a Ctrl-C of the command line now saves (checkpoint.STOP)
                        STOP.arm()
                    bar.update(1)
                    post = f"elbo {self.elbos[-1].max():.6g}"
                    bar.set_postfix_str(
                        post + (f" rmse {self.rmses[-1].min():.4f}" if self.rmses else ""),
                        refresh=False,
                    )
                    n = len(self.elbos)
                    if s.checkpoint is not None and (
                        n % s.checkpoint_every == 0 or self.converged or n == s.max_iter
                    ):
                        self.save()
                    STOP.check()
                if s.checkpoint is not None:
                    STOP.finish()
            except KeyboardInterrupt:
                if s.checkpoint is None:
                    raise
                self.save()
                raise KeyboardInterrupt(
                    f"interrupted after {len(self.elbos)} VB iterations; the work done is saved in "
                    f"{str(s.checkpoint)!r}: call fit again with the same arguments to resume"
                ) from None
            finally:
                if s.checkpoint is not None:
                    STOP.disarm()


def fit_vb(prep, info, progress_bar: bool) -> VBFit:
    """Closed-form mean-field VB (:class:`~bmczoo.inference.settings.VB`)."""
    run = _Run(prep, info)
    run.resume()
    run.loop(progress_bar)
    best = int(np.argmax(run.elbos[-1]))  # the run with the highest final ELBO
    state = run.state
    if (
        run.mesh is not None
    ):  # gathered to one device (from every process), without the padding rows
        state = jax.tree.map(lambda x: jnp.asarray(to_host(x)), run.unshard(state))
    state = jax.tree.map(lambda x: x[best : best + 1], state)
    prior, (m1, m2) = vb.vb_prior(info.prior, run.links), info.shape
    qp = vb.prior_q(state)
    stats_M, stats_N = (
        prior.vb_factor_stats(state.m, state.V),
        prior.vb_factor_stats(state.n, state.W),
    )
    one = lambda d: {k: np.asarray(v)[0] for k, v in d.items()}  # noqa: E731
    q_prior = one(prior.vb_params(qp, stats_M, stats_N, m1, m2))
    q_noise = one(info.likelihood.vb_params(state.noise)) if state.noise else {}
    bias = one(state.bias) if state.bias else {}
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
        row_bias=bias.get("b_mean"),
        col_bias=bias.get("c_mean"),
        elbo=np.asarray([e[best] for e in run.elbos]),
        rmse_trace=np.asarray([r[best] for r in run.rmses]),
        converged=run.converged,
        state=state,
        num_iter=len(run.elbos),
        best_run=best,
        # wall seconds of each iteration run by this call (the first includes compilation)
        iteration_seconds=tuple(run.seconds),
        final_elbo_per_run=tuple(float(x) for x in run.elbos[-1]),
    )
