"""The run loop (``bmczoo.inference.run``) with a stand-in job: Ctrl-C and checkpoints."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from bmczoo.inference import run


@pytest.fixture(autouse=True)
def python_s_own_ctrl_c():
    """Python's default SIGINT handler for each test (the command line's tests, run in the
    same process, take SIGINT for the rest of it), the previous one restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Counter(run.Job):
    """Counts iterations; its "compiled call" takes the state (as a donating call does)
    and returns the next one, and presses Ctrl-C in the middle of call ``press_at``."""

    unit = "sweep"

    def __init__(self, total: int, press_at: int | None = None):
        self.total, self.press_at = total, press_at
        self.state = np.zeros(1)
        self.calls = 0
        self.saved: list[int] = []

    def done(self) -> int:
        return int(self.state[0])

    def compile(self) -> None:
        pass

    def advance(self, n: int) -> None:
        taken, self.state = self.state, None  # given up to the call
        self.calls += 1
        if self.calls == self.press_at:
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):  # the interpreter checks for signals between bytecodes
                pass
        self.state = taken + n

    def phase(self, it: int) -> str:
        return "sampling"

    def postfix(self, n: int, seconds: float) -> dict:
        return {}

    def save(self) -> None:
        self.saved.append(self.done())

    def lost(self) -> bool:
        return self.state is None

    def describe(self) -> str:
        return f"{self.done()} of {self.total} sweeps"


def test_a_run_without_interrupt_saves_at_every_checkpoint_and_the_end(tmp_path):
    job = _Counter(total=10)
    run.run_loop(job, tmp_path / "c.npz", checkpoint_every=4, progress_bar=False)
    assert job.done() == 10 and job.saved == [4, 8, 10]


def test_ctrl_c_inside_a_call_that_takes_the_state_saves_the_work_done(tmp_path):
    """Python's KeyboardInterrupt waits for the call to return its state, so the work
    done is saved (without the wait the state would be lost with the call)."""
    job = _Counter(total=10, press_at=3)
    with pytest.raises(KeyboardInterrupt, match="interrupted after 3 of 10 sweeps; the work"):
        run.run_loop(job, tmp_path / "c.npz", checkpoint_every=100, progress_bar=False)
    assert job.saved == [3] and not job.lost()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_a_checkpoint_ctrl_c_is_python_s_own(tmp_path):
    job = _Counter(total=10, press_at=2)
    with pytest.raises(KeyboardInterrupt) as info:
        run.run_loop(job, None, checkpoint_every=100, progress_bar=False)
    assert str(info.value) == "" and job.saved == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_in_background_returns_the_value_computed_beside_the_block():
    import threading

    seen = {}

    def fn():
        seen["thread"] = threading.current_thread().name
        return 41 + 1

    with run.in_background(fn) as task:
        here = threading.current_thread().name
    assert task.result() == 42
    assert seen["thread"] != here


def test_in_background_without_a_function_starts_no_thread():
    import threading

    before = threading.active_count()
    with run.in_background(None) as task:
        assert threading.active_count() == before
    assert task.result() is None


def test_in_background_raises_the_function_s_error_in_the_caller():
    def fn():
        raise ValueError("the start failed")

    with run.in_background(fn) as task:
        pass
    with pytest.raises(ValueError, match="the start failed"):
        task.result()


def test_in_background_runs_under_the_caller_s_x64_setting():
    import jax
    import jax.numpy as jnp

    def fn():
        return jnp.asarray(1.0).dtype  # the default float of the thread's setting

    with jax.enable_x64(True):
        with run.in_background(fn) as task:
            pass
    assert task.result() == jnp.float64
    with jax.enable_x64(False):
        with run.in_background(fn) as task:
            pass
    assert task.result() == jnp.float32


def test_in_background_waits_for_its_thread_when_the_block_raises():
    import time

    done = []

    def fn():
        time.sleep(0.2)
        done.append(True)

    with pytest.raises(KeyError):
        with run.in_background(fn):
            raise KeyError("the block failed")
    assert done == [True]


def test_in_background_uses_the_caller_s_default_device():
    """On the second of two host devices (a child process: the device count is fixed when
    JAX starts)."""
    import os
    import subprocess
    import sys

    script = (
        "import jax, jax.numpy as jnp\n"
        "from bmczoo.inference import run\n"
        "device = jax.devices()[1]\n"
        "with jax.default_device(device):\n"
        "    with run.in_background(lambda: jnp.zeros(2)) as task:\n"
        "        pass\n"
        "assert task.result().devices() == {device}, task.result().devices()\n"
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


class _BlasThreads(_Counter):
    """Records the BLAS libraries' thread counts (threadpoolctl) during compile and calls."""

    def __init__(self, total: int):
        super().__init__(total)
        self.seen: list[dict[str, int]] = []

    def _look(self):
        from threadpoolctl import threadpool_info

        self.seen.append(
            {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        )

    def compile(self) -> None:
        self._look()

    def advance(self, n: int) -> None:
        self._look()
        super().advance(n)


def test_blas_runs_on_one_thread_during_a_run_and_as_before_after_it(monkeypatch):
    """OpenBLAS's threads would compete with XLA's (bmczoo._blas): one thread during the
    compilation and every call, the previous limits after the run, and no limit with
    ``LIMIT`` off."""
    import scipy.linalg.cython_lapack  # noqa: F401  (JAX's LAPACK: loaded before the start)
    from threadpoolctl import threadpool_info, threadpool_limits

    from bmczoo import _blas

    with threadpool_limits(limits=2, user_api="blas"):  # a known start, whatever the machine
        before = {
            i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"
        }
        assert any("scipy.libs" in p or "scipy/" in p for p in before), before
        job = _BlasThreads(total=5)
        run.run_loop(job, None, checkpoint_every=100, progress_bar=False)
        assert job.seen and all(set(s.values()) == {1} for s in job.seen), job.seen
        assert job.seen[0].keys() == before.keys()
        after = {
            i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"
        }
        assert after == before
        monkeypatch.setattr(_blas, "LIMIT", False)
        job = _BlasThreads(total=5)
        run.run_loop(job, None, checkpoint_every=100, progress_bar=False)
        assert all(s == before for s in job.seen), job.seen
