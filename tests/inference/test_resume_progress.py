"""A run resumed from its checkpoint says so in one line (what was restored), and its
progress bar starts at the iterations already done, with a rate and a time left counted
from the iterations run since: the run loop with a stand-in job, Gibbs and VB fits, and
the command line."""

from __future__ import annotations

import logging
import re
import signal
import time

import pytest

import bmczoo as bmc
from bmczoo.cli import main
from bmczoo.inference import checkpoint as ck
from bmczoo.inference import run


@pytest.fixture(autouse=True)
def python_s_own_ctrl_c():
    """Python's default SIGINT handler for each test (the command line's tests, run in the
    same process, take SIGINT), the previous one restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Resumed(run.Job):
    """A stand-in job resumed with ``start`` of ``total`` iterations done; each iteration
    takes ``seconds``."""

    unit = "sweep"
    chunked = True

    def __init__(self, total: int, start: int, seconds: float = 0.0):
        self.total, self.it, self.seconds = total, start, seconds

    def done(self) -> int:
        return self.it

    def compile(self) -> None:
        pass

    def advance(self, n: int) -> None:
        time.sleep(n * self.seconds)
        self.it += n

    def phase(self, it: int) -> str:
        return "sampling"

    def postfix(self, n: int, seconds: float) -> dict:
        return {}

    def save(self) -> None:
        pass

    def describe(self) -> str:
        return f"{self.it} of {self.total} sweeps"


def _lines(err: str) -> list[str]:
    """What stderr showed, one line per state of the bar."""
    return [s.strip() for s in err.replace("\r", "\n").splitlines() if s.strip()]


def _bar_counts(lines: list[str]) -> list[int]:
    """The iteration counts the bar showed after the compilation (``n`` of ``n/total``)."""
    return [int(m.group(1)) for s in lines if (m := re.search(r"\| *(\d+)/\d+ \[", s))]


def test_a_resumed_run_says_what_was_restored_and_the_bar_starts_there(tmp_path, capsys):
    path = tmp_path / "run.npz"
    run.run_loop(_Resumed(100, 60), path, checkpoint_every=10, progress_bar=True)
    lines = _lines(capsys.readouterr().err)
    said = [s for s in lines if s.startswith("resuming")]
    assert said == [f"resuming from {str(path)!r}: 60 of 100 sweeps done"]
    assert lines.index(said[0]) == 0  # before the compilation's bar
    counts = _bar_counts(lines)
    assert counts[0] == 60 and counts[-1] == 100 and counts == sorted(counts), counts
    assert not any("<-" in s for s in lines), lines  # never a negative time left


def test_the_rate_and_time_left_count_only_the_iterations_run_since(tmp_path):
    """60 restored iterations are not work done in no time: after 10 iterations of 0.02 s
    the bar's rate is about 50 per second (not 70 / 0.2 s) and the time left about 0.6 s."""
    job = _Resumed(100, 60)
    progress = run.Progress(job, enabled=True)
    try:
        progress.start(60)
        time.sleep(0.2)
        job.it = 70
        progress.update(70, 10, 0.2)
        fmt = progress.bar.format_dict
        rate = fmt["rate"] or (fmt["n"] - fmt["initial"]) / fmt["elapsed"]
        assert fmt["n"] == 70 and fmt["initial"] == 60
        assert 25 < rate < 55, rate  # 50 per second, less the time the test takes
        assert 0.5 < (fmt["total"] - fmt["n"]) / rate < 1.2
    finally:
        progress.close()


def test_the_line_goes_to_the_logger_without_a_bar(tmp_path, capsys, caplog):
    path = tmp_path / "run.npz"
    with caplog.at_level(logging.INFO, logger="bmczoo"):
        run.run_loop(_Resumed(10, 4), path, checkpoint_every=10, progress_bar=False)
    assert capsys.readouterr().err == ""
    said = [r for r in caplog.records if r.name == "bmczoo" and "resuming" in r.getMessage()]
    assert [r.getMessage() for r in said] == [f"resuming from {str(path)!r}: 4 of 10 sweeps done"]
    assert said[0].levelno == logging.INFO


def test_no_line_for_a_fresh_run_or_without_a_checkpoint(tmp_path, capsys):
    run.run_loop(_Resumed(10, 0), tmp_path / "run.npz", checkpoint_every=5, progress_bar=True)
    run.run_loop(_Resumed(10, 0), None, checkpoint_every=5, progress_bar=True)
    assert "resuming" not in capsys.readouterr().err


def test_a_finished_checkpoint_says_nothing_is_left(tmp_path, capsys):
    run.run_loop(_Resumed(10, 10), tmp_path / "run.npz", checkpoint_every=5, progress_bar=True)
    lines = _lines(capsys.readouterr().err)
    assert lines[0].endswith(": 10 of 10 sweeps done; nothing left to run")
    assert _bar_counts(lines)[-1] == 10


def _stop_after_first_checkpoint(monkeypatch, method: str):
    """Ask the run to stop (as the command line's Ctrl-C does) after its first checkpoint."""
    if method == "gibbs":
        from bmczoo.inference.gibbs import driver

        target, name = driver, "_save"
    else:
        from bmczoo.inference.vb import driver

        target, name = driver._Runs, "save"
    real = getattr(target, name)

    def save_then_stop(*args, **kwargs):
        real(*args, **kwargs)
        ck.request_stop()

    monkeypatch.setattr(target, name, save_then_stop)
    return lambda: monkeypatch.setattr(target, name, real)


@pytest.fixture(scope="module")
def data():
    return bmc.datasets.simulate_paper(30, seed=1).train


@pytest.mark.parametrize(
    "method, kw, said",
    [
        ("gibbs", dict(num_warmup=10, num_samples=30, num_chains=1), "10 of 40 sweeps"),
        ("vb", dict(method="vb", tol=0.0, max_iter=20), "5 of 20 iterations"),
    ],
)
def test_a_resumed_fit_says_so(data, tmp_path, capsys, monkeypatch, method, kw, said):
    path = tmp_path / "run.npz"
    kw = dict(K=2, seed=0, checkpoint=path, checkpoint_every=10 if method == "gibbs" else 5, **kw)
    restore = _stop_after_first_checkpoint(monkeypatch, method)
    with pytest.raises(KeyboardInterrupt):
        bmc.fit(data, progress_bar=False, **kw)
    restore()
    capsys.readouterr()
    bmc.fit(data, progress_bar=True, **kw)
    lines = _lines(capsys.readouterr().err)
    assert [s for s in lines if "resuming" in s] == [f"resuming from {str(path)!r}: {said} done"]
    restored = int(said.split()[0])
    counts = _bar_counts(lines)
    assert counts[0] == restored and counts[-1] == int(said.split()[2]), counts


def test_the_command_line_says_so(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.npz"
    args = ["fit", "--data", "sim:30", "-K", "2", "--num-warmup", "10", "--num-samples", "30"]
    args += ["--thinning", "1", "--checkpoint", str(path), "--checkpoint-every", "10"]
    restore = _stop_after_first_checkpoint(monkeypatch, "gibbs")
    assert main(args) == 130
    restore()
    assert "resuming" not in capsys.readouterr().err
    assert main(args) == 0
    lines = _lines(capsys.readouterr().err)
    assert [s for s in lines if "resuming" in s] == [
        f"resuming from {str(path)!r}: 10 of 40 sweeps done"
    ]
    assert _bar_counts(lines)[0] == 10
    assert main(args) == 0  # the finished checkpoint
    assert f"resuming from {str(path)!r}: 40 of 40 sweeps done; nothing left to run" in (
        capsys.readouterr().err
    )


def test_units_in_words():
    assert _Resumed(1, 0).units() == "sweeps"

    class _It(_Resumed):
        unit = "it"

    assert _It(1, 0).units() == "iterations"
