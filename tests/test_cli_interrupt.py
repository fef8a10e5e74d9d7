"""Ctrl-C at any moment of ``bmczoo fit``: one line on stderr, exit code 130, never a
segmentation fault or a swallowed interrupt, and a checkpoint written on the way resumes.

Each try starts the console command in a fresh process and sends it one SIGINT, placed by
what the process has printed (``PYTHONUNBUFFERED``) rather than by wall-clock time alone,
so that the phase it lands in does not depend on the machine's load:

* from the moment ``bmczoo.cli`` is imported (its line in Python's import-time log):
  importing JAX and the zoo, building the parser, reading the data (expected failures
  while ``bmczoo/__init__.py`` imports the whole zoo before ``main`` can take SIGINT);
* after the ``prior:`` line, printed just before ``bmc.fit`` (setting up, tracing and
  compiling with no compilation cache: XLA's compiler runs for seconds);
* once the checkpoint file exists (warm-up or sampling of Gibbs, VB iterations), after
  which the same command must resume and print the uninterrupted run's result;
* after the ``wrote MODEL`` line (writing ``--out``: predictions, ArviZ file, report);
* on ML-100K (``$BMCZOO_ML100K`` or ``../shared/data/ml-100k``, skipped when absent)
  while the issue's model compiles.

The children get a compilation cache of their own (the suite's shared cache is never
written by a process killed on purpose) and the suite's XLA flags.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

BMCZOO = Path(sys.executable).with_name("bmczoo")

# a small Gibbs fit whose sampling outlasts the latest signal (5 s after the ``prior:``
# line) on a fast machine too: 60,100 sweeps of the paper's model at m = 40 (about 10 s
# after that line on a 2-core machine whose first fit compiles in a second), 200 kept draws
SMALL = ["--data", "sim:40", "-K", "2", "--quiet"]
GIBBS = SMALL + [
    "--num-warmup",
    "100",
    "--num-samples",
    "60000",
    "--thinning",
    "300",
    "--checkpoint-every",
    "200",
]
VB = SMALL + ["--method", "vb", "--max-iter", "1500", "--tol", "0", "--checkpoint-every", "5"]
ISSUE_MODEL = [
    "--prior",
    "normal-wishart",
    "--likelihood",
    "learned",
    "--biases",
    "-K",
    "10",
    "--quiet",
]


@functools.cache
def _import_is_lazy() -> bool:
    """Whether ``import bmczoo.cli`` leaves JAX unimported, so that the command installs
    its Ctrl-C handling before the long imports (else an interrupt while the package is
    imported is Python's KeyboardInterrupt, which nothing of bmczoo can catch)."""
    code = "import sys, bmczoo.cli; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "False"


def _cache_flag(env) -> list[str]:
    """The command turns on a compilation cache in the user's folder unless the environment
    names one: the children of ``env`` run without (their compile phase must take time)."""
    return [] if env.get("JAX_COMPILATION_CACHE_DIR") else ["--no-compilation-cache"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The children's environment: unbuffered output, no compilation cache."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    e.pop("JAX_COMPILATION_CACHE_DIR", None)
    e.update(PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    return e


@pytest.fixture(scope="module")
def cached_env(env, tmp_path_factory):
    """``env`` with a compilation cache of this module's own (warm after a first run)."""
    return {
        **env,
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path_factory.mktemp("jax_cache")),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


class Try:
    """One ``bmczoo fit`` process: its output lines as they come, and one SIGINT."""

    def __init__(self, args, env, cwd):
        self.proc = subprocess.Popen(
            [str(BMCZOO), "fit", *_cache_flag(env), *map(str, args)],
            env=env,
            cwd=cwd,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(s, b), daemon=True)
            for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self._readers:
            t.start()

    def _read(self, stream, into):
        for line in stream:
            into.append(line.rstrip("\n"))
            self.lines.put(line)

    def wait_for(self, condition, timeout=300.0):
        """Wait until ``condition()`` holds (polled as lines arrive); False if the process
        ended first."""
        end = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                return condition()
            if time.monotonic() > end:
                self.close()
                raise AssertionError(f"timed out; stdout {self.out}, stderr {self.err}")
            try:
                self.lines.get(timeout=0.05)
            except queue.Empty:
                pass
        return True

    def printed(self, prefix: str):
        return lambda: any(line.startswith(prefix) for line in self.out)

    def interrupt(self, delay: float = 0.0, timeout: float = 300.0) -> int:
        time.sleep(delay)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Never left running, whatever failed; its output read to the end."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self._readers:
            t.join(10)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def check_interrupted(self, rc: int, *needles: str) -> str:
        """Exit code 130, and stderr is the one ``bmczoo: interrupted...`` line (beside
        XLA's own log lines): no traceback, no 'Exception ignored', no fatal error."""
        lines = [
            line for line in self.err if not line.startswith("import time:")
        ]  # PYTHONPROFILEIMPORTTIME
        err = "\n".join(lines)
        assert rc == 130, (rc, self.out, err)
        ours = [line for line in lines if line.startswith("bmczoo:")]
        assert len(ours) == 1 and ours[0].startswith("bmczoo: interrupted"), err
        assert lines[-1] == ours[0], err
        for bad in ("Traceback", "Exception ignored", "Fatal Python error", "KeyboardInterrupt"):
            assert bad not in err, err
        for needle in needles:
            assert needle in ours[0], ours[0]
        return ours[0]


def _finish(args, env, cwd) -> list[str]:
    """Run ``bmczoo fit ARGS`` to the end; its stdout lines."""
    out = subprocess.run(
        [str(BMCZOO), "fit", *_cache_flag(env), *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


# ----------------------------------------------------------------------------- early phases
@pytest.mark.parametrize("delay", [0.1, 0.3, 0.6, 1.0, 2.0])
def test_interrupt_from_the_start(delay, env, tmp_path):
    """From the moment ``bmczoo.cli`` is imported (Python's import-time log): importing
    JAX, NumPyro and the zoo, building the parser, reading or simulating the data (and
    compiling, when those are quick).  Python's own start-up before that is not bmczoo's."""
    assert _import_is_lazy(), (
        "import bmczoo.cli imported JAX: a Ctrl-C during that import would come "
        "before bmczoo.cli.main can handle it"
    )
    t = Try(SMALL, {**env, "PYTHONPROFILEIMPORTTIME": "1"}, tmp_path)
    assert t.wait_for(lambda: any(re.search(r"\|\s+bmczoo\.cli$", line) for line in t.err))
    t.check_interrupted(t.interrupt(delay))


@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0, 2.0, 3.0, 5.0])
def test_interrupt_while_compiling(delay, env, tmp_path):
    """Between the ``prior:`` line and the first sweep: tracing and XLA's compilation (the
    phase where Python's KeyboardInterrupt was swallowed or segfaulted at exit); without
    --checkpoint the line says how to make the fit resumable."""
    t = Try(GIBBS, env, tmp_path)
    assert t.wait_for(t.printed("prior:"))
    line = t.check_interrupted(t.interrupt(delay))
    assert "--checkpoint" in line, line


@pytest.mark.parametrize("delay", [0.5, 2.0])
def test_interrupt_before_the_first_checkpoint(delay, env, tmp_path):
    """With --checkpoint, during compilation: nothing saved yet, or (slow enough) a valid
    checkpoint that the same command resumes."""
    ckpt = tmp_path / "run.npz"
    args = GIBBS + ["--checkpoint", ckpt]
    t = Try(args, env, tmp_path)
    assert t.wait_for(t.printed("prior:"))
    t.check_interrupted(t.interrupt(delay), str(ckpt))
    assert not list(tmp_path.glob("*.tmp")), list(tmp_path.iterdir())
    if ckpt.exists():
        assert _finish(args, env, tmp_path)[-1].startswith("theta_rmse=")


# ----------------------------------------------------------------------------- warm-up, sampling
_UNINTERRUPTED: dict[str, str] = {}  # the last line of an uninterrupted run, by method


@pytest.mark.parametrize("method, delay", [("gibbs", 0.0), ("gibbs", 0.3), ("vb", 0.0)])
def test_interrupt_after_a_checkpoint_resumes(method, delay, cached_env, tmp_path):
    """Once a checkpoint exists: the run saves its work and says so; the same command
    resumes it and prints exactly the uninterrupted run's result."""
    base = GIBBS if method == "gibbs" else VB
    if method not in _UNINTERRUPTED:  # also warms the cache
        _UNINTERRUPTED[method] = _finish(base, cached_env, tmp_path)[-1]
    expected = _UNINTERRUPTED[method]
    ckpt = tmp_path / "run.npz"
    args = base + ["--checkpoint", ckpt]
    t = Try(args, cached_env, tmp_path)
    assert t.wait_for(ckpt.exists), (t.out, t.err)
    line = t.check_interrupted(t.interrupt(delay), str(ckpt), "rerun the same command")
    # VB can reach its fixed point (tol=0: an ELBO that no longer changes) before the signal:
    # its last checkpoint then holds the finished run
    assert "interrupted after" in line or (
        method == "vb" and "keeps the work saved so far" in line
    ), line
    assert not list(tmp_path.glob("*.tmp")), list(tmp_path.iterdir())
    assert _finish(args, cached_env, tmp_path)[-1] == expected


# ----------------------------------------------------------------------------- writing the outputs
@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_interrupt_while_writing_outputs(delay, cached_env, tmp_path):
    """After --save wrote the model, while --out is written: the line gives the fit's
    result; the saved model is whole."""
    import bmczoo as bmc

    model = tmp_path / "model.npz"
    t = Try(
        GIBBS
        + ["--num-samples", "200", "--thinning", "20", "--save", model, "--out", tmp_path / "out"],
        cached_env,
        tmp_path,
    )
    assert t.wait_for(t.printed("wrote"))
    line = t.check_interrupted(t.interrupt(delay))
    assert "the fit itself finished (theta_rmse=" in line, line
    fit = bmc.load(model)
    assert np.all(np.isfinite(fit.predict(np.arange(3), np.arange(3))))
    assert not list(tmp_path.glob("*.tmp")), list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- the issue's case
@pytest.mark.requires_ml100k()
@pytest.mark.parametrize("delay", [0.5, 2.0])
def test_interrupt_ml100k_while_compiling(delay, env, tmp_path, ml100k):
    """``bmczoo fit --data u.data --prior normal-wishart --likelihood learned --biases -K 10``
    interrupted while XLA compiles."""
    t = Try(["--data", ml100k / "u.data", *ISSUE_MODEL], env, tmp_path)
    assert t.wait_for(t.printed("prior:"))
    t.check_interrupted(t.interrupt(delay), "--checkpoint")
