"""The Gibbs driver of ``bmc.fit``: the chains run by :func:`bmczoo.inference.run.run_loop`,
their checkpoint arrays, and the :class:`~bmczoo.inference.results.GibbsFit` they give.

One compiled program runs a chunk of sweeps (warm-up and sampling alike: the number of
sweeps is a traced argument) and writes each kept draw (:func:`gibbs.draws`) into a
device buffer; the state and the buffer are donated to it.  The checkpoint holds the
sampler state (factors, gamma, PRNG keys, running sums) without the padding rows of a
sharded run, and the draws collected so far.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ... import _xla
from ...linalg import device_array, uses_gram_kernel
from ...offsets import shift_clip
from .. import gibbs
from .. import settings as st
from ...offsets.base import table_key
from ..checkpoint import check_settings, fingerprint, load_npz, save_npz
from ..options import record
from ..problem import Prepared, run_settings, track_entries
from ..results import FitInfo, GibbsFit
from ..run import Job, donated, in_background, run_loop
from ..sharding import to_host
from ..thinning import num_kept

__all__ = ["fit_gibbs", "run_gibbs"]

# factor draws are stored for arbitrary-entry prediction only below this many bytes
_STORE_FACTORS_BUDGET = 256 * 2**20

# ------------------------------------------------------------------ checkpoint arrays

_ROWS = ("M", "N", "row_bias", "col_bias")
#: state fields that are dicts of arrays, stored under ``state/<prefix>/<name>``
_DICTS = {
    "prior_state": "prior",
    "lik_state": "lik",
    "bias_link": "bias",
    "offset_state": "offset",
}


#: the chain's fields stored one array each (the rows, the dicts and the key apart)
_PLAIN = tuple(
    f for f in gibbs.GibbsState._fields if f not in _ROWS + tuple(_DICTS) + ("key", "stats")
)


def _state_arrays(state: gibbs.GibbsState, problem: gibbs.GibbsProblem) -> dict[str, np.ndarray]:
    """The arrays of a checkpoint's state: ``state/<field>`` for the chain's fields and the
    accumulators alike (one flat namespace: their names differ)."""
    m1, m2 = problem.dims
    out = {f"state/{f}": to_host(getattr(state, f)) for f in _PLAIN}
    out.update({f"state/{f}": to_host(x) for f, x in state.stats._asdict().items()})
    for f, m in zip(_ROWS, (m1, m2, m1, m2)):  # without the padding rows of a sharded run
        out[f"state/{f}"] = to_host(getattr(state, f)[:, :m])
    for field, prefix in _DICTS.items():
        for name, x in getattr(state, field).items():
            if isinstance(x, dict):  # an offset's variables: state/offset/<offset>/<name>
                out.update({f"state/{prefix}/{name}/{k}": to_host(v) for k, v in x.items()})
            else:
                out[f"state/{prefix}/{name}"] = to_host(x)
    out["state/key"] = to_host(jax.random.key_data(state.key))
    out["state/key_impl"] = np.asarray(str(jax.random.key_impl(state.key)))
    return out


def _restore_state(arrays: dict, problem: gibbs.GibbsProblem) -> gibbs.GibbsState:
    arrays = dict(arrays)
    if "state/proba_sum" not in arrays and not problem.latent:  # a likelihood without levels
        arrays["state/proba_sum"] = np.zeros(
            np.shape(arrays.get("state/pred_sum", np.zeros((0, 0)))) + (0,)
        )
    if "state/switches" not in arrays and "state/failure" in arrays:  # a run without switches
        arrays["state/switches"] = np.zeros((np.shape(arrays["state/failure"])[0], 2), np.int32)
    plain = _ROWS + _PLAIN + gibbs.RunStats._fields
    missing = [f for f in plain if f"state/{f}" not in arrays]
    if missing:
        raise ValueError(
            f"the checkpoint was written by an earlier version of bmczoo (its Gibbs state has no "
            f"{', '.join(missing)}): start the run again with another checkpoint path"
        )
    fields = {f: jnp.asarray(arrays[f"state/{f}"]) for f in _ROWS + _PLAIN}
    fields["stats"] = gibbs.RunStats(
        **{f: jnp.asarray(arrays[f"state/{f}"]) for f in gibbs.RunStats._fields}
    )
    for field, prefix in _DICTS.items():
        p = f"state/{prefix}/"
        fields[field] = {k[len(p) :]: jnp.asarray(v) for k, v in arrays.items() if k.startswith(p)}
    offsets = {}
    for k, v in fields["offset_state"].items():
        name, var = k.split("/", 1)
        offsets.setdefault(name, {})[var] = v
    fields["offset_state"] = offsets
    fields["key"] = jax.random.wrap_key_data(
        jnp.asarray(arrays["state/key"]), impl=str(arrays["state/key_impl"])
    )
    return gibbs.place(gibbs.GibbsState(**fields), problem)


def _resume(checkpoint, settings: dict, problem) -> tuple[gibbs.GibbsState, list[dict]]:
    stored, arrays = load_npz(checkpoint)
    check_settings(checkpoint, stored, settings)
    n = int(arrays["num_draws"])
    names = [k[len("draws/") :] for k in arrays if k.startswith("draws/")]
    return _restore_state(arrays, problem), [
        {k: arrays[f"draws/{k}"][i] for k in names} for i in range(n)
    ]


def _save(checkpoint, settings: dict, state, problem, draws: list[dict]) -> None:
    arrays = _state_arrays(state, problem)
    arrays["num_draws"] = np.asarray(len(draws))
    if draws:
        for k in draws[0]:
            arrays[f"draws/{k}"] = np.stack([to_host(d[k]) for d in draws])
    save_npz(checkpoint, settings, arrays)


# ------------------------------------------------------------------ the sweeps


def _run_sweeps(state, buffer, problem, n, *, prior, store_factors):
    """``n`` sweeps (a traced count: one program serves every chunk of a run, warm-up and
    sampling alike), each kept draw (:func:`gibbs.draws`) written into ``buffer`` at its
    index (``state.stats.num_kept - 1`` after the sweep that keeps it)."""

    def body(_, carry):
        s, buf = carry
        s = gibbs.step(s, problem, prior)

        def write(buf):
            d = gibbs.draws(s, problem, store_factors)
            return jax.tree.map(
                lambda b, x: jax.lax.dynamic_update_index_in_dim(b, x, s.stats.num_kept - 1, 0),
                buf,
                d,
            )

        return s, jax.lax.cond(gibbs.is_kept(s.iteration, problem), write, lambda b: b, buf)

    return jax.lax.fori_loop(0, n, body, (state, buffer))


def _draw_buffer(state, problem, store_factors: bool, size: int, draws: list[dict]):
    """Device arrays (size, C, ...) for the kept draws, the first ``len(draws)`` filled."""
    shapes = jax.eval_shape(
        functools.partial(gibbs.draws, store_factors=store_factors), state, problem
    )
    buf = {k: np.zeros((size,) + v.shape, v.dtype) for k, v in shapes.items()}
    for i, d in enumerate(draws):
        for k, b in buf.items():
            b[i] = d[k]
    return {k: device_array(v) for k, v in buf.items()}


def _buffer_draws(buffer, n: int) -> list[dict]:
    host = {k: to_host(v[:n]) for k, v in buffer.items()}
    return [{k: v[i] for k, v in host.items()} for i in range(n)]


def _pooled_rmse(state, problem) -> float | None:
    """Test RMSE of the running posterior mean of all chains pooled (None before the first
    kept draw or without test ratings)."""
    e, stats = problem.entries, state.stats
    n_test = int(e.test_values.shape[0])
    k = int(stats.num_kept)
    if not problem.has_test or n_test == 0 or k == 0:
        return None
    y = to_host(e.test_values).astype(np.float64)
    if problem.latent:
        proba = to_host(stats.proba_sum)[:, :n_test].astype(np.float64).mean(0) / k
        pred = np.asarray(problem.likelihood.expected_value(proba), np.float64)
    else:
        theta = to_host(stats.pred_sum)[:, :n_test].astype(np.float64).mean(0) / k
        pred = shift_clip(theta, float(e.offset), float(e.clip_lo), float(e.clip_hi))
    return float(np.sqrt(np.mean((pred - y) ** 2)))


class _Chains(Job):
    """The chains of one run as :func:`~bmczoo.inference.run.run_loop` drives them: sweeps
    in chunks, the state and the draw buffer donated to each call.  With ``start``,
    ``state`` holds only the start's shapes (:func:`jax.eval_shape`) and ``start()``
    computes it while the sweeps' program is traced and compiled (not called when the run
    resumes from its checkpoint)."""

    unit = "sweep"
    chunked = True

    def __init__(
        self, state, problem, prior, s: st.Gibbs, store_factors: bool, settings: dict, start=None
    ):
        self.problem, self.prior, self.store_factors = problem, prior, store_factors
        self.checkpoint, self.settings = s.checkpoint, settings
        self.num_warmup, self.total = s.num_warmup, s.num_warmup + s.num_samples
        draws: list[dict] = []
        if s.checkpoint is not None and Path(s.checkpoint).exists():
            state, draws = _resume(s.checkpoint, settings, problem)
            start = None
        size = num_kept(self.total, s.num_warmup, s.num_samples, s.thinning)
        self.buffer = _draw_buffer(state, problem, store_factors, max(size, 1), draws)
        self.state, self._start = state, start
        self.it = 0 if start is not None else int(state.iteration)

    def done(self) -> int:
        return self.it

    def boundary(self, it: int) -> int:
        return self.num_warmup if it < self.num_warmup else self.total

    def compile(self) -> None:
        # jitted per run with the problem as an argument: no array is baked into the compiled
        # program, and it is dropped with the run.  The state and the draws are updated in
        # place (donated), with and without a checkpoint: the two runs are one program, so
        # they give the same draws bit for bit (the code generated for a donated and a copied
        # argument can round differently)
        run = jax.jit(
            functools.partial(_run_sweeps, prior=self.prior, store_factors=self.store_factors),
            donate_argnums=(0, 1),
        )
        zero = np.asarray(0, np.int32)  # a host scalar: no XLA program of its own
        # the start (a program of its own) is compiled and run in a second thread while
        # this one traces and lowers the sweeps in Python
        with in_background(self._start) as started:
            lowered = run.lower(self.state, self.buffer, self.problem, zero)
            self._run = _xla.compile(lowered)
            if self._start is not None:
                self.state = started.result()
        self._start = None

    def advance(self, n: int) -> None:
        self.state, self.buffer = self._run(
            self.state, self.buffer, self.problem, np.asarray(n, np.int32)
        )
        self.it = int(self.state.iteration)  # waits for the chunk

    def phase(self, it: int) -> str:
        return "warmup" if it < self.num_warmup else "sampling"

    def postfix(self, n: int, seconds: float) -> dict:
        post = {"s/sweep": f"{seconds / max(n, 1):.3g}"}
        rmse = _pooled_rmse(self.state, self.problem) if self.it > self.num_warmup else None
        if rmse is not None:
            post["rmse"] = f"{rmse:.4f}"
        return post

    def check(self) -> None:
        gibbs.check_failure(self.state)

    def save(self) -> None:
        draws = _buffer_draws(self.buffer, int(self.state.stats.num_kept))
        _save(self.checkpoint, self.settings, self.state, self.problem, draws)

    def lost(self) -> bool:
        return donated(self.state, self.buffer)

    def describe(self) -> str:
        return f"{int(self.state.iteration)} of {self.total} sweeps"


def run_gibbs(
    state: gibbs.GibbsState,
    problem: gibbs.GibbsProblem,
    prior,
    s: st.Gibbs,
    *,
    store_factors: bool = False,
    settings: dict | None = None,
    progress_bar: bool = True,
    start=None,
) -> tuple[gibbs.GibbsState, dict[str, np.ndarray], dict]:
    """Run the ``num_warmup + num_samples`` sweeps of ``s`` from ``state`` (or from
    ``s.checkpoint`` when that file exists and was written with the same ``settings``),
    collecting :func:`gibbs.draws` (with the factors if ``store_factors``) at each kept
    iteration (the iterations NumPyro's ``MCMC`` keeps).  With ``start`` (a function
    returning the state), ``state`` may hold only the state's shapes
    (:func:`jax.eval_shape`): the start is computed while the sweeps compile.

    Returns the final state, the collected draws, each (chain, draw, ...), and the
    timings: ``compile_seconds`` (the sweeps' program) and ``sweep_seconds`` (per sweep
    run, averaged over the run).  A non-finite draw raises ``FloatingPointError``
    (:func:`gibbs.check_failure`) at the next checkpoint or at the end.
    """
    job = _Chains(state, problem, prior, s, store_factors, dict(settings or {}), start)
    t_compile, calls = run_loop(job, s.checkpoint, s.checkpoint_every, progress_bar)
    draws = _buffer_draws(job.buffer, int(job.state.stats.num_kept))
    swept, sweep_time = sum(n for n, _ in calls), sum(t for _, t in calls)
    timings = dict(
        compile_seconds=t_compile, sweep_seconds=sweep_time / swept if swept else float("nan")
    )
    gibbs.check_failure(job.state)
    stacked = {}
    if draws:
        for k in draws[0]:
            # (draw, chain, ...) -> (chain, draw, ...)
            stacked[k] = np.swapaxes(np.stack([to_host(d[k]) for d in draws]), 0, 1)
    return job.state, stacked, timings


# ------------------------------------------------------------------ the driver


def _init_gamma(s: st.Gibbs, K: int, dtype):
    if s.init_gamma is None:
        return None
    g = np.asarray(s.init_gamma, np.float64)
    if g.ndim == 1 and g.shape[0] != K:
        raise ValueError(
            f"init_gamma must be a positive number or an array of K={K} of them, "
            f"got {len(g)} values"
        )
    return jnp.broadcast_to(jnp.asarray(np.broadcast_to(g, (K,)), dtype), (s.num_chains, K))


def _store_factors(s: st.Gibbs, core, problem) -> bool:
    """``store_factors`` resolved: ``"auto"`` keeps the factor-sized draws (``M``, ``N``,
    the biases, a feature link's ``B``, feature-driven biases' weights: what
    :func:`gibbs.draws` adds with the factors) when those of all kept draws of all chains
    take less than :data:`_STORE_FACTORS_BUDGET`."""
    if s.store_factors != "auto":
        return bool(s.store_factors)
    with_factors, without = (
        jax.eval_shape(functools.partial(gibbs.draws, store_factors=f), core, problem)
        for f in (True, False)
    )
    per_draw = sum(
        math.prod(v.shape) * v.dtype.itemsize for k, v in with_factors.items() if k not in without
    )
    return (s.num_samples // s.thinning) * per_draw < _STORE_FACTORS_BUDGET


def _gibbs_problem(prep: Prepared, info: FitInfo, s: st.Gibbs, track):
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
            context=prep.context,
        ),
        schedule=gibbs.Schedule(s.num_warmup, s.thinning, s.num_warmup + s.num_samples),
        options=s.sweep_options,
        mesh=s.devices,
        likelihood=info.likelihood,
        biases=info.biases,
        prior=info.prior,
        offsets=info.offsets,
    )


def _checkpoint_settings(
    prep: Prepared, info: FitInfo, track, store: bool, gamma0, gram: bool
) -> dict:
    """What identifies a Gibbs run for its checkpoint: the settings fields recorded as
    their options say (:func:`bmczoo.inference.options.record`: an option of the sweep is
    left out at the value the sampler had before the option existed, so older checkpoints
    still resume), the tracked entries, ``store``, ``gamma0``, and ``gram``: whether the
    sweeps take their Gram matrices from the compiled kernel (other rounding than the
    sparse product, so a resumed run would not continue bit for bit)."""
    return run_settings(
        prep,
        info,
        **record(info.settings),
        track=fingerprint(*track),
        store_factors=store,
        init_gamma=None if gamma0 is None else [float(x) for x in gamma0[0]],
        # a checkpoint of the sparse product's Gram matrices has no such key
        **({"gram_kernel": True} if gram else {}),
    )


def _gibbs_chains(prep: Prepared, info: FitInfo, track, progress_bar: bool):
    """The chains of NumPyro's ``MCMC`` with the conjugate kernel (the same keys, hence the
    same draws up to the rounding of another compilation: docs/scaling.md, "Compilation")
    run by :func:`run_gibbs`: one compiled program for warm-up and sampling, a progress
    bar with the compilation and the test RMSE, and the checkpoints when asked for."""
    s: st.Gibbs = info.settings
    gamma0 = _init_gamma(s, info.K, info.dtype)
    problem = _gibbs_problem(prep, info, s, track)
    extra = {} if gamma0 is None else {"gamma": gamma0}
    C, start = s.num_chains, None

    def init(extra):
        key = jax.random.key(info.seed)
        keys = key[None] if C == 1 else jax.random.split(key, C)
        return gibbs.init(keys, problem, info.prior, info.K, **extra)

    if problem.mesh is None:
        # one compiled program (the keys included) instead of an XLA compilation per
        # operation of the start, compiled and run while the sweeps compile; the problem
        # enters as constants (only its scalars and shapes are read)
        init = jax.jit(init)
        core = jax.eval_shape(init, extra)

        def start():
            return _xla.compile(init.lower(extra))(extra)
    else:
        core = init(extra)
    store = _store_factors(s, core, problem)
    gram = uses_gram_kernel(problem.rows, info.K)
    settings = _checkpoint_settings(prep, info, track, store, gamma0, gram)
    return run_gibbs(
        core,
        problem,
        info.prior,
        s,
        store_factors=store,
        settings=settings,
        progress_bar=progress_bar,
        start=start,
    )


def fit_gibbs(prep: Prepared, info: FitInfo, progress_bar: bool) -> GibbsFit:
    """Conjugate Gibbs (:class:`~bmczoo.inference.settings.Gibbs`)."""
    s: st.Gibbs = info.settings
    track = track_entries(prep.train, s.track, info.seed)
    core, samples, timings = _gibbs_chains(prep, info, track, progress_bar)
    gibbs.check_failure(core, dtype=info.dtype)
    C, stats = s.num_chains, core.stats
    pred_sum = np.asarray(stats.pred_sum, np.float64).reshape(C, -1)
    pred_sq = np.asarray(stats.pred_sq, np.float64).reshape(C, -1)
    num_kept = int(np.asarray(stats.num_kept).ravel()[0])
    # pooled over chains: E[theta], E[theta^2] - E[theta]^2 (running sums, no draws)
    pred_theta = pred_sum.mean(axis=0) / max(num_kept, 1)
    pred_var = np.maximum(pred_sq.mean(axis=0) / max(num_kept, 1) - pred_theta**2, 0.0)
    pred_proba, pred_mean = None, info.shift.apply(pred_theta)
    if info.likelihood.latent:  # level probabilities pooled over chains
        pred_proba = np.asarray(stats.proba_sum, np.float64).reshape(
            (C,) + stats.proba_sum.shape[-2:]
        ).mean(0) / max(num_kept, 1)
        pred_mean = np.asarray(info.likelihood.expected_value(pred_proba))
    # (chain, iteration)
    return GibbsFit(
        info=info,
        samples=samples,
        pred_rows=prep.pred_rows,
        pred_cols=prep.pred_cols,
        pred_mean=pred_mean,
        pred_theta=pred_theta,
        pred_var=pred_var,
        pred_proba=pred_proba,
        rmse_draw=np.asarray(stats.rmse_draw).reshape(C, -1),
        rmse_mean=np.asarray(stats.rmse_mean).reshape(C, -1),
        track_rows=np.asarray(track[0]),
        track_cols=np.asarray(track[1]),
        num_kept=num_kept,
        timings=timings,
        switches=np.asarray(stats.switches).reshape(C, 2) if s.anneal_steps else None,
        pred_context=table_key(prep.context) if info.offsets else None,
    )
