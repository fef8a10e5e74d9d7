"""Checkpoint / resume for long Gibbs and VB runs (``.npz``, no pickle).

``bmc.fit(..., checkpoint="run.npz", checkpoint_every=100)`` writes the sampler state
(factors, gamma, PRNG keys, running sums) and everything collected so far every
``checkpoint_every`` iterations, atomically (write to a temporary file, then rename).
Calling ``fit`` again with the same arguments resumes from the file: the key stream is
part of the state, so the resumed run produces exactly the draws an uninterrupted run
would have produced.  Ctrl-C writes a checkpoint of the work done before stopping.

The file also stores the run's settings (data fingerprint, prior, K, sampler settings,
...); resuming with different settings raises ``ValueError`` naming what differs.
Factors are stored without the padding rows of a sharded run, so a checkpoint can be
resumed on another number of devices.

What "exactly" means depends on the backend (:func:`resume_guarantee`): on CPU, XLA's
programs are deterministic, so the resumed run's draws equal the uninterrupted run's bit
for bit.  On other backends (GPU) the state, the key stream and the iteration counters
are restored bit for bit, so the resumed run draws the same random numbers, but the float
reductions of a sweep (the hot path's segment sums are scatter-adds with atomics,
cuSPARSE, XLA's reductions) may round differently from one run to the next: the draws
then equal the uninterrupted run's up to a float tolerance (``rtol`` of the guarantee,
relative to the largest magnitude of each array).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from .. import _xla
from ..offsets import shift_clip
from . import gibbs
from .sharding import to_host
from .thinning import num_kept

__all__ = [
    "WRITE_LOCK",
    "ResumeGuarantee",
    "check_settings",
    "fingerprint",
    "load_npz",
    "request_stop",
    "resume_guarantee",
    "run_gibbs",
    "save_npz",
    "write_npz_atomic",
]

FORMAT = "bmczoo-checkpoint-2"  # 2: the prior's state, tau and biases stored by name


class ResumeGuarantee(NamedTuple):
    """How a resumed run compares with the uninterrupted one on a backend.

    ``exact``: bit for bit.  Otherwise every float array of the resumed run is within
    ``rtol * max(1, max |uninterrupted|)`` of the uninterrupted run's, element-wise
    (the key stream, iteration counters and the number of draws are equal exactly).
    """

    platform: str
    exact: bool
    rtol: float

    def check(self, expected, actual, err_msg: str = "") -> None:
        """Raise ``AssertionError`` if ``actual`` breaks the guarantee against ``expected``."""
        expected, actual = np.asarray(expected), np.asarray(actual)
        if self.exact or not np.issubdtype(expected.dtype, np.inexact):
            np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
            return
        scale = max(1.0, float(np.max(np.abs(expected), initial=0.0, where=np.isfinite(expected))))
        np.testing.assert_allclose(
            actual, expected, rtol=self.rtol, atol=self.rtol * scale, err_msg=err_msg
        )


def resume_guarantee(dtype=None, platform: str | None = None) -> ResumeGuarantee:
    """What a resumed run of float ``dtype`` (None: float32, float64 when x64 is on)
    guarantees on ``platform`` (None: ``jax.default_backend()``): bit-exact on CPU (XLA's
    CPU programs are deterministic); elsewhere equal up to ``rtol = 10 sqrt(eps)`` of the
    dtype (3.5e-3 in float32, 1.5e-7 in float64): the same draws of the random numbers,
    with the rounding of non-deterministic GPU reductions carried through the chain.

    Parameters
    ----------
    dtype : dtype, optional
        The run's float dtype.
    platform : str, optional
        ``"cpu"``, ``"gpu"``, ... (default: ``jax.default_backend()``).
    """
    platform = jax.default_backend() if platform is None else platform
    if dtype is None:
        dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    if platform == "cpu":
        return ResumeGuarantee(platform, True, 0.0)
    return ResumeGuarantee(platform, False, 10.0 * float(np.sqrt(np.finfo(np.dtype(dtype)).eps)))


def fingerprint(*arrays) -> str:
    """SHA-1 of the bytes (and shapes, dtypes) of ``arrays``: identifies the data of a run."""
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_npz(path: str | os.PathLike, settings: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` and the JSON ``settings`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_npz_atomic(
        path,
        __format__=np.asarray(FORMAT),
        __settings__=np.asarray(json.dumps(settings, sort_keys=True)),
        **arrays,
    )


def write_npz_atomic(path: str | os.PathLike, **arrays) -> None:
    """``np.savez(path, **arrays)`` through a temporary file in the same folder renamed
    over ``path``: a reader never sees a half-written file (checkpoints, saved fits).
    The file gets the permissions a plain ``open(path, "w")`` would give it (``0o666``
    less the umask), not ``mkstemp``'s ``0o600``; an exit of the command line on Ctrl-C
    waits for the write to end (:data:`WRITE_LOCK`)."""
    path = Path(path)
    with WRITE_LOCK:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o666 & ~current_umask())
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it
    (``/proc/self/status``; ``os.umask`` must set a mask to read one, which another
    thread creating a file at that moment would see)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Held while :func:`write_npz_atomic` writes a file and renames it into place: the
#: command line's exit on Ctrl-C takes it first, so that it never leaves a temporary file
#: behind or stops a rename half-way.
WRITE_LOCK = threading.RLock()


class _StopRequest:
    """A stop asked of the running checkpointed loop (:func:`run_gibbs`, the VB driver's)
    from another thread: the command line's Ctrl-C watcher.

    The command line does not let Ctrl-C raise ``KeyboardInterrupt`` wherever the main
    thread happens to be: raised inside JAX's tracing, XLA's compilation or a garbage
    collector callback, it can be swallowed ("Exception ignored in ...") or end the
    interpreter while XLA's threads still run (a segmentation fault at exit).  Its watcher
    thread asks the loop to stop instead; a loop that holds work it can save
    (:meth:`arm`) raises ``KeyboardInterrupt`` at its next boundary between two compiled
    calls (:meth:`check`, :meth:`finish`), saves its checkpoint and re-raises with the
    message that says where; with nothing to save the watcher exits at once.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._armed = False
        self._pending = False

    def request(self) -> bool:
        """Ask the armed loop to stop; False when no loop holds work to save (the caller
        exits on its own)."""
        with self._lock:
            self._pending = self._armed
            return self._armed

    def arm(self) -> None:
        """The calling loop has work a checkpoint can save: a stop request goes to it."""
        with self._lock:
            self._armed = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a stop was requested (a loop's boundary)."""
        if self._pending:
            raise KeyboardInterrupt

    def finish(self) -> None:
        """The loop is done: no later request goes to it; raise ``KeyboardInterrupt``
        if one came before (its checkpoint holds the finished run)."""
        with self._lock:
            pending, self._armed, self._pending = self._pending, False, False
        if pending:
            raise KeyboardInterrupt

    def disarm(self) -> None:
        with self._lock:
            self._armed = self._pending = False


#: The one stop request of the process (a command line runs one fit at a time).
STOP = _StopRequest()


def request_stop() -> bool:
    """Ask the running checkpointed loop to save its work and raise ``KeyboardInterrupt``
    at its next boundary; False when no loop holds work a checkpoint would save.  Called
    from the command line's Ctrl-C watcher thread."""
    return STOP.request()


def load_npz(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """``(settings, arrays)`` of a checkpoint written by :func:`save_npz`."""
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"checkpoint {str(path)!r} is not a readable .npz file: {err}") from None
    found = str(data.pop("__format__", ""))
    if found != FORMAT:
        if found.startswith("bmczoo-checkpoint-"):
            raise ValueError(
                f"checkpoint {str(path)!r} was written by another version of bmczoo (format {found}; "
                f"this version reads {FORMAT}): start the run again with another checkpoint path"
            )
        raise ValueError(f"checkpoint {str(path)!r} is not a bmczoo checkpoint ({FORMAT})")
    settings = json.loads(str(data.pop("__settings__")))
    return settings, data


def check_settings(path, stored: dict, current: dict) -> None:
    """Raise ``ValueError`` naming the first setting that differs (the method first: the
    other settings depend on it)."""
    for k in sorted(set(stored) | set(current), key=lambda k: (k != "method", k)):
        if stored.get(k) != current.get(k):
            raise ValueError(
                f"checkpoint {str(path)!r} was written by a different run: {k} is {stored.get(k)!r} there and "
                f"{current.get(k)!r} now; use another checkpoint path or the original arguments"
            )


_ROWS = ("M", "N", "row_bias", "col_bias")
#: state fields that are dicts of arrays, stored under ``state/<prefix>/<name>``
_DICTS = {"prior_state": "prior", "lik_state": "lik"}


def _state_arrays(state: gibbs.GibbsState, problem: gibbs.GibbsProblem) -> dict[str, np.ndarray]:
    m1, m2 = problem.dims
    skip = _ROWS + tuple(_DICTS) + ("key",)
    out = {
        f"state/{f}": to_host(getattr(state, f)) for f in gibbs.GibbsState._fields if f not in skip
    }
    for f, m in zip(_ROWS, (m1, m2, m1, m2)):  # without the padding rows of a sharded run
        out[f"state/{f}"] = to_host(getattr(state, f)[:, :m])
    for field, prefix in _DICTS.items():
        for name, x in getattr(state, field).items():
            out[f"state/{prefix}/{name}"] = to_host(x)
    out["state/key"] = to_host(jax.random.key_data(state.key))
    out["state/key_impl"] = np.asarray(str(jax.random.key_impl(state.key)))
    return out


def _restore_state(arrays: dict, problem: gibbs.GibbsProblem) -> gibbs.GibbsState:
    arrays = dict(arrays)
    if (
        "state/proba_sum" not in arrays and not problem.latent
    ):  # written before the latent likelihoods
        arrays["state/proba_sum"] = np.zeros(
            np.shape(arrays.get("state/pred_sum", np.zeros((0, 0)))) + (0,)
        )
    if (
        "state/switches" not in arrays and "state/failure" in arrays
    ):  # written before the annealed switch
        arrays["state/switches"] = np.zeros((np.shape(arrays["state/failure"])[0], 2), np.int32)
    plain = [f for f in gibbs.GibbsState._fields if f not in _DICTS and f != "key"]
    missing = [f for f in plain if f"state/{f}" not in arrays]
    if missing:
        raise ValueError(
            f"the checkpoint was written by an earlier version of bmczoo (its Gibbs state has no "
            f"{', '.join(missing)}): start the run again with another checkpoint path"
        )
    fields = {f: jnp.asarray(arrays[f"state/{f}"]) for f in plain}
    for field, prefix in _DICTS.items():
        p = f"state/{prefix}/"
        fields[field] = {k[len(p) :]: jnp.asarray(v) for k, v in arrays.items() if k.startswith(p)}
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


def _run_sweeps(state, buffer, problem, n, *, prior, store_factors):
    """``n`` sweeps (a traced count: one program serves every chunk of a run, warm-up and
    sampling alike), each kept draw (:func:`gibbs.draws`) written into ``buffer`` at its
    index (``state.num_kept - 1`` after the sweep that keeps it)."""

    def body(_, carry):
        s, buf = carry
        s = gibbs.step(s, problem, prior)

        def write(buf):
            d = gibbs.draws(s, problem, store_factors)
            return jax.tree.map(
                lambda b, x: jax.lax.dynamic_update_index_in_dim(b, x, s.num_kept - 1, 0), buf, d
            )

        return s, jax.lax.cond(gibbs.is_kept(s.iteration, problem), write, lambda b: b, buf)

    return jax.lax.fori_loop(0, n, body, (state, buffer))


def _donated(*trees) -> bool:
    """Whether an array of ``trees`` was given up to a compiled call (donated)."""
    return any(x.is_deleted() for x in jax.tree.leaves(trees) if isinstance(x, jax.Array))


def _draw_buffer(state, problem, store_factors: bool, size: int, draws: list[dict]):
    """Device arrays (size, C, ...) for the kept draws, the first ``len(draws)`` filled."""
    shapes = jax.eval_shape(
        functools.partial(gibbs.draws, store_factors=store_factors), state, problem
    )
    buf = {k: np.zeros((size,) + v.shape, v.dtype) for k, v in shapes.items()}
    for i, d in enumerate(draws):
        for k, b in buf.items():
            b[i] = d[k]
    return {k: jnp.asarray(v) for k, v in buf.items()}


def _buffer_draws(buffer, n: int) -> list[dict]:
    host = {k: to_host(v[:n]) for k, v in buffer.items()}
    return [{k: v[i] for k, v in host.items()} for i in range(n)]


class _Progress:
    """The sweeps' progress bar: a "compiling" phase with its elapsed time and no estimate
    of the time left, then "warmup" and "sampling" with the seconds per sweep and, given
    test ratings, the test RMSE of the running posterior mean of all chains pooled."""

    def __init__(self, total: int, initial: int, num_warmup: int, enabled: bool):
        self.num_warmup = num_warmup
        self.bar = tqdm(
            total=total,
            initial=initial,
            disable=not enabled,
            unit="sweep",
            bar_format="{desc}: {elapsed}",
            desc="compiling",
        )
        self._fmt = (
            "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
        )
        self._done = threading.Event()
        self._ticker = None
        if enabled:
            # XLA compiles without returning to Python: a thread moves the elapsed time on
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._done.wait(0.5):
            self.bar.refresh()

    def start(self, it: int) -> None:
        """Compiled: the sweeps begin at ``it``."""
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        self.bar.set_description_str(self._phase(it), refresh=False)
        self.bar.bar_format = self._fmt
        self.bar.reset(total=self.bar.total)
        self.bar.update(it)

    def _phase(self, it: int) -> str:
        return "warmup" if it < self.num_warmup else "sampling"

    def update(self, it: int, sweeps: int, seconds: float, rmse: float | None) -> None:
        self.bar.set_description_str(self._phase(it), refresh=False)
        post = {"s/sweep": f"{seconds / max(sweeps, 1):.3g}"}
        if rmse is not None:
            post["rmse"] = f"{rmse:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(sweeps)

    def close(self) -> None:
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        self.bar.close()


def _pooled_rmse(state, problem) -> float | None:
    """Test RMSE of the running posterior mean of all chains pooled (None before the first
    kept draw or without test ratings)."""
    n_test = int(problem.test_values.shape[0])
    k = int(state.num_kept)
    if not problem.has_test or n_test == 0 or k == 0:
        return None
    y = to_host(problem.test_values).astype(np.float64)
    if problem.latent:
        proba = to_host(state.proba_sum)[:, :n_test].astype(np.float64).mean(0) / k
        pred = np.asarray(problem.likelihood.expected_value(proba), np.float64)
    else:
        theta = to_host(state.pred_sum)[:, :n_test].astype(np.float64).mean(0) / k
        pred = shift_clip(
            theta, float(problem.offset), float(problem.clip_lo), float(problem.clip_hi)
        )
    return float(np.sqrt(np.mean((pred - y) ** 2)))


#: seconds of sweeps between two updates of the progress bar (and Ctrl-C checks)
_CHUNK_SECONDS = 0.25


def _next_chunk(n: int, seconds: float) -> int:
    """Sweeps in the next chunk after ``n`` took ``seconds``: about :data:`_CHUNK_SECONDS`
    of work, at most four times the last chunk.  The processes of a multi-process run must
    run the same chunks (each chunk's program holds collectives): their own timings differ,
    so they double the chunk instead, up to 64 sweeps."""
    if jax.process_count() > 1:
        return min(2 * n, 64)
    return max(1, min(4 * n, int(_CHUNK_SECONDS * n / max(seconds, 1e-9))))


def run_gibbs(
    state: gibbs.GibbsState,
    problem: gibbs.GibbsProblem,
    prior,
    store_factors: bool = False,
    *,
    num_warmup: int,
    num_samples: int,
    thinning: int,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
    settings: dict | None = None,
    progress_bar: bool = True,
    timings: dict | None = None,
) -> tuple[gibbs.GibbsState, dict[str, np.ndarray]]:
    """Run ``num_warmup + num_samples`` sweeps from ``state`` (or from ``checkpoint`` when
    that file exists and was written with the same ``settings``), collecting
    :func:`gibbs.draws` (with the factors if ``store_factors``) at each kept iteration
    (the iterations NumPyro's ``MCMC`` keeps).

    Returns the final state and the collected draws, each (chain, draw, ...); a dict
    passed as ``timings`` receives ``compile_seconds`` (the sweeps' program) and
    ``sweep_seconds`` (per sweep run, averaged over the run).
    A non-finite draw raises ``FloatingPointError`` (:func:`gibbs.check_failure`) at the
    next checkpoint or at the end.
    """
    total = num_warmup + num_samples
    settings = dict(settings or {})
    draws: list[dict] = []
    if checkpoint is not None and Path(checkpoint).exists():
        state, draws = _resume(checkpoint, settings, problem)
    size = num_kept(total, num_warmup, num_samples, thinning)
    buffer = _draw_buffer(state, problem, store_factors, max(size, 1), draws)

    progress = _Progress(total, int(state.iteration), num_warmup, progress_bar)
    # jitted per run with the problem as an argument: no array is baked into the compiled
    # program, and it is dropped with the run.  The state and the draws are updated in
    # place (donated), with and without a checkpoint: the two runs are one program, so
    # they give the same draws bit for bit (the code generated for a donated and a copied
    # argument can round differently)
    run = jax.jit(
        functools.partial(_run_sweeps, prior=prior, store_factors=store_factors),
        donate_argnums=(0, 1),
    )
    t_compile = time.perf_counter()
    run = _xla.compile(run.lower(state, buffer, problem, jnp.asarray(0, jnp.int32)))
    t_compile = time.perf_counter() - t_compile

    def save(state, buffer):
        _save(checkpoint, settings, state, problem, _buffer_draws(buffer, int(state.num_kept)))

    every = checkpoint_every if checkpoint is not None else total
    it = int(state.iteration)
    chunk, swept, sweep_time = 1, 0, 0.0
    progress.start(it)
    try:
        while it < total:
            # up to the next checkpoint and the end of warm-up (the bar's phase changes there)
            stop = min(total, (it // every + 1) * every)
            if it < num_warmup:
                stop = min(stop, num_warmup)
            n = min(chunk, stop - it)
            t0 = time.perf_counter()
            state, buffer = run(state, buffer, problem, jnp.asarray(n, jnp.int32))
            it = int(state.iteration)  # waits for the chunk
            seconds = time.perf_counter() - t0
            swept, sweep_time = swept + n, sweep_time + seconds
            if checkpoint is not None:  # compiled and dispatched: from now on there is work to save
                STOP.arm()
            chunk = _next_chunk(n, seconds)
            progress.update(
                it, n, seconds, _pooled_rmse(state, problem) if it > num_warmup else None
            )
            if checkpoint is not None and (it % every == 0 or it == total):
                gibbs.check_failure(state)
                save(state, buffer)
            STOP.check()
        if checkpoint is not None:
            STOP.finish()
    except KeyboardInterrupt:
        if checkpoint is None:
            raise
        if _donated(state, buffer):  # Ctrl-C inside the call that took them
            raise KeyboardInterrupt(
                f"interrupted; {str(checkpoint)!r} holds the run up to its last checkpoint: "
                "call fit again with the same arguments to resume"
            ) from None
        save(state, buffer)
        raise KeyboardInterrupt(
            f"interrupted after {int(state.iteration)} of {total} sweeps; the work done is saved in "
            f"{str(checkpoint)!r}: call fit again with the same arguments to resume"
        ) from None
    finally:
        progress.close()
        if checkpoint is not None:
            STOP.disarm()
    draws = _buffer_draws(buffer, int(state.num_kept))
    if timings is not None:
        timings.update(
            compile_seconds=t_compile, sweep_seconds=sweep_time / swept if swept else float("nan")
        )
    gibbs.check_failure(state)
    stacked = {}
    if draws:
        for k in draws[0]:
            # (draw, chain, ...) -> (chain, draw, ...)
            stacked[k] = np.swapaxes(np.stack([to_host(d[k]) for d in draws]), 0, 1)
    return state, stacked
