"""The experiment runner: cache keys, start selection, jobs, table format.

The fitting tests use a tiny simulation (30 x 30, K = 2, 25 sweeps) but still compile a
dozen fits (about a minute on 2 cores): ``slow``."""

import json

import pytest

from bmczoo.experiments import Result, format_table, run_experiment
from bmczoo.experiments import runner

# a tiny simulation: 30 x 30, K = 2, short chains, one dataset
TINY = runner._Settings(seeds=(0,), num_warmup=5, num_samples=20, thinning=5, vb_max_iter=10)
CELLS = [
    ("m=30", 30, 2, "discrete", {"C": 1.0, "p": 0.05, "eps": 0.1}, 0.5),
    ("m=30", 30, 2, "inverse-gamma", {"a": 1.0, "b": 0.01}, 0.5),
]


def _keys(out):
    return [json.loads(p.read_text())["key"] for p in sorted(out.glob("*.json"))]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    return out, runner._run_cells("tiny", out, TINY, CELLS, progress=False, jobs=1)


@pytest.mark.slow
def test_discrete_start_is_selected_and_keyed(serial):
    out, rows = serial
    keys = _keys(out)
    disc = [k for k in keys if k["prior"] == "discrete"]
    valid = [k for k in disc if k["stage"] == "validation"]
    # 3 grid values x 2 starts, each its own cache entry
    assert len(valid) == 6
    assert sorted(k["start"] for k in valid) == ["slab"] * 3 + ["spike"] * 3
    assert all(k["init_gamma"] == k["hyper"]["C" if k["start"] == "slab" else "eps"] for k in valid)
    assert len({json.dumps(k, sort_keys=True) for k in valid}) == 6
    # the inverse gamma starts at gamma = 1, recorded in the key
    ig = [k for k in keys if k["prior"] == "inverse-gamma"]
    assert len(ig) >= 4 and all(k["start"] == "gamma=1" and k["init_gamma"] == 1.0 for k in ig)
    d, i = rows
    assert d.prior == "discrete" and d.selected_start in ("slab", "spike")
    assert d.paper_hyper_start in ("slab", "spike")
    assert i.selected_start == "gamma=1"
    # the selected pair has the smallest validation RMSE
    vals = {(json.dumps(k["hyper"], sort_keys=True), k["start"]): v for k, v in
            ((json.loads(p.read_text())["key"], json.loads(p.read_text())["value"]) for p in out.glob("*.json"))
            if k["prior"] == "discrete" and k["stage"] == "validation"}
    best = min(vals, key=vals.get)
    assert best == (json.dumps(d.selected_hyper, sort_keys=True), d.selected_start)


@pytest.mark.slow
def test_rerun_reads_the_cache(serial, monkeypatch):
    out, rows = serial

    def boom(task):
        raise AssertionError(f"recomputed {task.key}")

    monkeypatch.setattr(runner, "_compute", boom)
    assert runner._run_cells("tiny", out, TINY, CELLS, progress=False, jobs=1) == rows


@pytest.mark.slow
def test_jobs_give_identical_results(serial, tmp_path):
    """Two worker processes (spawn) give the same numbers as one process, fit by fit."""
    out, rows = serial
    par = runner._run_cells("tiny", tmp_path, TINY, CELLS, progress=False, jobs=2)
    assert par == rows
    a = {json.dumps(k, sort_keys=True): v for k, v in
         ((json.loads(p.read_text())["key"], json.loads(p.read_text())["value"]) for p in out.glob("*.json"))}
    b = {json.dumps(k, sort_keys=True): v for k, v in
         ((json.loads(p.read_text())["key"], json.loads(p.read_text())["value"]) for p in tmp_path.glob("*.json"))}
    assert a == b


def test_bad_jobs():
    with pytest.raises(ValueError, match="jobs"):
        run_experiment("simulation-m", quick=True, jobs=0)


def test_format_table_shows_the_start():
    r = Result("simulation-m", "m=100", "discrete", "gibbs", 0.6, {"C": 1.0, "p": 0.05, "eps": 0.11}, 0.61,
               {"C": 1.0, "p": 0.05, "eps": 0.22}, 0.58, 4, "spike x3, slab x1", "slab")
    table = format_table([r])
    assert "| start |" in table.splitlines()[0]
    assert "spike x3, slab x1 (paper's hyper: slab)" in table
    assert "-0.020" in table
