"""The Gibbs progress bar: a compiling phase, then warm-up and sampling with the seconds
per sweep and (given test ratings) the pooled test RMSE of the running posterior mean,
labelled the same with and without a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc


@pytest.fixture(scope="module")
def split():
    return bmc.datasets.simulate_paper(30, seed=2).train.split(0.25, seed=0)


def _bar_states(err: str) -> list[str]:
    return [s.strip() for s in err.replace("\r", "\n").splitlines() if s.strip()]


@pytest.mark.parametrize("checkpoint", [False, True])
def test_progress_bar_phases(split, capsys, tmp_path, checkpoint):
    train, test = split
    kw = {"checkpoint": tmp_path / "run.npz", "checkpoint_every": 10} if checkpoint else {}
    fit = bmc.fit(
        train,
        K=3,
        prior=bmc.priors.InverseGamma(),
        num_warmup=15,
        num_samples=25,
        num_chains=2,
        test=test,
        seed=0,
        progress_bar=True,
        **kw,
    )
    states = _bar_states(capsys.readouterr().err)
    phases = [s.split(":")[0] for s in states]
    assert phases[0] == "compiling"
    # the phases in order, each at least once
    order = [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]]
    assert order == ["compiling", "warmup", "sampling"], order
    assert all(
        "<" not in s for s in states if s.startswith("compiling")
    )  # no time-left estimate there
    assert all(
        "s/sweep=" in s
        for s in states
        if s.startswith(("warmup", "sampling")) and "%" in s and not s.startswith(("warmup:   0%",))
    )
    last = states[-1]
    assert last.startswith("sampling: 100%") and "40/40" in last
    # the RMSE shown at the end is the pooled posterior mean's
    shown = float(last.split("rmse=")[1].rstrip("]").strip())
    assert shown == pytest.approx(fit.rmse(test), abs=5e-5)
    assert not any("rmse=" in s for s in states if s.startswith("warmup"))


def test_progress_bar_off(split, capsys):
    train, test = split
    fit = bmc.fit(
        train,
        K=3,
        num_warmup=5,
        num_samples=5,
        thinning=1,
        num_chains=1,
        test=test,
        seed=0,
        progress_bar=False,
    )
    assert capsys.readouterr().err == ""
    assert np.isfinite(fit.rmse(test)) and fit.timings["sweep_seconds"] > 0


def test_chunks_of_a_multi_process_run_do_not_depend_on_timing(monkeypatch):
    """Each chunk's program holds the sharded sweep's collectives: the processes of a
    multi-process run must run the same chunks, whatever their own timings."""
    import jax

    from bmczoo.inference import run

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    for n in (1, 3, 40, 64):
        assert len({run._next_chunk(n, s) for s in (1e-4, 0.01, 1.0, 30.0)}) == 1
    monkeypatch.setattr(jax, "process_count", lambda: 1)
    assert run._next_chunk(8, 1.0) < run._next_chunk(
        8, 0.01
    )  # one process: about a quarter second a chunk
