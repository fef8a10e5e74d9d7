"""The one run loop of the iterative methods (Gibbs sweeps, VB iterations).

A run is a :class:`Job`: it compiles its program, advances by a number of iterations per
compiled call, and saves a checkpoint.  :func:`run_loop` drives it: the progress bar (a
"compiling" phase, then the job's phases: "warmup" and "sampling", or "vb"), chunks of
iterations of about a quarter second between two updates of the bar, a checkpoint every
``checkpoint_every`` iterations and at the end, and Ctrl-C: the work done is saved and
``KeyboardInterrupt`` says where.  A run resumed from its checkpoint says so in one line
(:func:`resumed_line`), and its bar starts at the iterations restored.  A compiled call
takes the state it advances (donated), so Python's Ctrl-C during a call is raised once the
call has returned.  The command line's Ctrl-C reaches the loop through
:func:`bmczoo.inference.checkpoint.request_stop`.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
import sys
import threading
import time

import jax
from tqdm.auto import tqdm

from .._blas import one_blas_thread
from .checkpoint import STOP

__all__ = ["Job", "donated", "in_background", "run_loop"]

_log = logging.getLogger("bmczoo")


def donated(*trees) -> bool:
    """Whether an array of ``trees`` was given up to a compiled call (donated)."""
    return any(x.is_deleted() for x in jax.tree.leaves(trees) if isinstance(x, jax.Array))


class _Background:
    """The result of :func:`in_background`'s function: :meth:`result` waits for it (None
    at once without a function)."""

    def __init__(self, fn):
        self._value = self._error = self._thread = None
        if fn is None:
            return
        # thread-local settings: the caller's are used
        x64, device = bool(jax.config.jax_enable_x64), jax.config.jax_default_device

        def call():
            try:
                with jax.enable_x64(x64), jax.default_device(device):
                    self._value = fn()
            except BaseException as error:  # re-raised in the caller's thread
                self._error = error

        self._thread = threading.Thread(target=call, name="bmczoo-background", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self):
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


@contextlib.contextmanager
def in_background(fn):
    """``with in_background(fn) as r``: ``fn()`` runs in a second thread (under the caller's
    ``jax_enable_x64`` and default device) while the block runs; ``r.result()`` waits for
    it and returns its value or raises its exception (None when ``fn`` is None: no
    thread).  Leaving the block, also by an exception, waits for the thread.

    XLA compiles and runs a program without holding Python's lock: a program compiled in
    the thread takes the CPU time the block spends tracing and lowering another in Python.
    """
    task = _Background(fn)
    try:
        yield task
    finally:
        task.join()


class Job(abc.ABC):
    """One run that :func:`run_loop` drives: ``total`` iterations at most, counted in
    ``unit`` ("sweep", "iteration"); ``chunked``: several iterations per compiled call
    (their number a traced argument), else one."""

    total: int
    unit: str = "iteration"
    chunked: bool = False

    @abc.abstractmethod
    def done(self) -> int:
        """Iterations run so far (those of a resumed checkpoint included)."""

    def pending(self) -> bool:
        """Whether iterations remain to be run."""
        return self.done() < self.total

    def boundary(self, it: int) -> int:
        """The next iteration after ``it`` where a chunk must end (a change of phase)."""
        return self.total

    @abc.abstractmethod
    def compile(self) -> None:
        """Compile the program of an iteration (or a chunk of them)."""

    @abc.abstractmethod
    def advance(self, n: int) -> None:
        """Run ``n`` iterations and wait for them."""

    @abc.abstractmethod
    def phase(self, it: int) -> str:
        """The progress bar's label at iteration ``it``."""

    @abc.abstractmethod
    def postfix(self, n: int, seconds: float) -> dict:
        """What the progress bar shows after a call that ran ``n`` iterations in ``seconds``."""

    def check(self) -> None:
        """Raise if the state cannot be saved as a checkpoint (a failed draw)."""

    @abc.abstractmethod
    def save(self) -> None:
        """Write the checkpoint of the work done."""

    def lost(self) -> bool:
        """Whether the state was given up to the compiled call in flight (nothing to save)."""
        return False

    @abc.abstractmethod
    def describe(self) -> str:
        """The work done, in words ("40 of 100 sweeps")."""

    def units(self) -> str:
        """The plural of :attr:`unit` in words ("sweeps", "iterations")."""
        return _UNITS.get(self.unit, self.unit + "s")


#: plurals of the units that tqdm shows abbreviated
_UNITS = {"it": "iterations"}


class Progress:
    """The progress bar of a run: a "compiling" phase with its elapsed time and no estimate
    of the time left, then the job's phases with what :meth:`Job.postfix` says."""

    def __init__(self, job: Job, enabled: bool):
        self.job = job
        self.bar = tqdm(
            total=job.total,
            initial=job.done(),
            disable=not enabled,
            unit=job.unit,
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
        """Compiled: the iterations begin at ``it`` (those of a resumed checkpoint)."""
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        self.bar.set_description_str(self.job.phase(it), refresh=False)
        self.bar.bar_format = self._fmt
        if self.bar.disable:
            return
        # The clock restarts and the restored iterations are where the bar starts (tqdm's
        # ``initial``), not work done in no time: the rate and the time left count only the
        # iterations run from here.  Not ``reset()``: it would show ``0/total`` first,
        # with a negative time left against ``initial``.  No update has run during the
        # compilation, so tqdm's rate averages are still empty.
        bar = self.bar
        bar.n = bar.last_print_n = bar.initial = it
        bar.start_t = bar.last_print_t = time.time()  # tqdm's clock
        bar.refresh()

    def update(self, it: int, n: int, seconds: float) -> None:
        """``n`` iterations took ``seconds``, up to ``it``."""
        self.bar.set_description_str(self.job.phase(it), refresh=False)
        self.bar.set_postfix(self.job.postfix(n, seconds), refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        self.bar.close()


#: seconds of iterations between two updates of the progress bar (and Ctrl-C checks)
_CHUNK_SECONDS = 0.25


def _next_chunk(n: int, seconds: float) -> int:
    """Iterations in the next chunk after ``n`` took ``seconds``: about
    :data:`_CHUNK_SECONDS` of work, at most four times the last chunk.  The processes of a
    multi-process run must run the same chunks (each chunk's program holds collectives):
    their own timings differ, so they double the chunk instead, up to 64."""
    if jax.process_count() > 1:
        return min(2 * n, 64)
    return max(1, min(4 * n, int(_CHUNK_SECONDS * n / max(seconds, 1e-9))))


@contextlib.contextmanager
def _interrupt_after_call(enabled: bool):
    """Hold Python's Ctrl-C (``KeyboardInterrupt``) until the compiled call in the block
    has returned and its result is kept: a call takes the state it advances (donated), so
    an interrupt raised inside it would leave nothing to save.  The wait is at most one
    chunk of iterations.  Only Python's default handler on the main thread is replaced; the
    command line's handler asks the loop to stop at its next boundary on its own."""
    if (
        not enabled
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    pressed = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pressed:
        raise KeyboardInterrupt


def _interrupted(job: Job, checkpoint) -> KeyboardInterrupt:
    """The Ctrl-C of a checkpointed run, saved when its state was not given up."""
    where = f"{str(checkpoint)!r}"
    if job.lost():  # Ctrl-C inside the call that took the state
        return KeyboardInterrupt(
            f"interrupted; {where} holds the run up to its last checkpoint: "
            "call fit again with the same arguments to resume"
        )
    job.save()
    return KeyboardInterrupt(
        f"interrupted after {job.describe()}; the work done is saved in {where}: "
        "call fit again with the same arguments to resume"
    )


def run_loop(
    job: Job,
    checkpoint: str | os.PathLike | None,
    checkpoint_every: int,
    progress_bar: bool,
) -> tuple[float, list[tuple[int, float]]]:
    """Run ``job`` to its end, with a checkpoint every ``checkpoint_every`` iterations and
    at the end when ``checkpoint`` is a path (a Ctrl-C then saves the work done).  BLAS
    runs on one thread meanwhile (:func:`bmczoo._blas.one_blas_thread`).

    Returns
    -------
    compile_seconds : float
        Seconds spent compiling (:meth:`Job.compile`).
    calls : list of (int, float)
        The iterations and wall seconds of each compiled call run.
    """
    # OpenBLAS's own threads would compete with XLA's for the cores (bmczoo._blas)
    with one_blas_thread():
        return _run_loop(job, checkpoint, checkpoint_every, progress_bar)


def resumed_line(job: Job, checkpoint) -> str:
    """The line that says a run resumes from ``checkpoint`` and what it restored."""
    line = f"resuming from {str(checkpoint)!r}: {job.done()} of {job.total} {job.units()} done"
    return line if job.pending() else line + "; nothing left to run"


def _say_resumed(job: Job, checkpoint, progress_bar: bool) -> None:
    """One line when the run resumes from its checkpoint: above the progress bar (on its
    stream) when the bar is shown, else on the ``bmczoo`` logger at INFO level (quiet
    unless logging is configured, as ``progress_bar=False`` asks)."""
    if checkpoint is None or job.done() == 0:  # a checkpoint is written after work only
        return
    line = resumed_line(job, checkpoint)
    if progress_bar:
        tqdm.write(line, file=sys.stderr)
    else:
        _log.info(line)


def _run_loop(job: Job, checkpoint, checkpoint_every: int, progress_bar: bool):
    saving = checkpoint is not None
    every = checkpoint_every if saving else job.total
    _say_resumed(job, checkpoint, progress_bar)
    progress = Progress(job, progress_bar)
    t_compile = time.perf_counter()
    job.compile()
    t_compile = time.perf_counter() - t_compile
    calls: list[tuple[int, float]] = []
    chunk, it = 1, job.done()
    progress.start(it)
    try:
        while job.pending():
            # up to the next checkpoint and the job's next boundary (the bar's phase changes there)
            stop = min(job.total, (it // every + 1) * every, job.boundary(it))
            n = min(chunk, stop - it)
            t0 = time.perf_counter()
            with _interrupt_after_call(saving):
                job.advance(n)
            it = job.done()
            seconds = time.perf_counter() - t0
            calls.append((n, seconds))
            if saving:  # compiled and dispatched: from now on there is work to save
                STOP.arm()
            chunk = _next_chunk(n, seconds) if job.chunked else 1
            progress.update(it, n, seconds)
            if saving and (it % every == 0 or not job.pending()):
                job.check()
                job.save()
            STOP.check()
        if saving:
            STOP.finish()
    except KeyboardInterrupt:
        if not saving:
            raise
        raise _interrupted(job, checkpoint) from None
    finally:
        progress.close()
        if saving:
            STOP.disarm()
    return t_compile, calls
