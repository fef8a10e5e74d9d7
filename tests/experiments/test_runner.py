"""The experiment runner: plans, cache keys, selection, start selection, jobs, table format.

The planning and selection tests run no fit.  ``test_tiny_grid_by_prior_name`` runs a
tiny grid (30 x 30, K = 2, 25 sweeps); the others that fit compile a dozen fits (about a
minute on 2 cores): ``slow``."""

import dataclasses
import hashlib
import inspect
import json
import math
from pathlib import Path

import pytest

from bmczoo.experiments import (
    GridCell,
    Result,
    Settings,
    format_table,
    plan_grid,
    plan_unit,
    run_experiment,
    run_grid,
    run_simulation_cell,
    select,
    summarise,
)
from bmczoo.experiments import execute, runner, tasks
from bmczoo.experiments.tasks import MovieLensData, SimulationData
from bmczoo.priors import Fixed, registry

# a tiny simulation: 30 x 30, K = 2, short chains, one dataset
# the paper's plain sweep (reproduce --no-column-moves): the cache keys checked below are the plain runs'
TINY = Settings(
    seeds=(0,), num_warmup=5, num_samples=20, thinning=5, vb_max_iter=10, column_moves=False
)
CELLS = [
    GridCell("m=30", 30, 2, "discrete", {"C": 1.0, "p": 0.05, "eps": 0.1}, 0.5),
    GridCell("m=30", 30, 2, "inverse-gamma", {"a": 1.0, "b": 0.01}, 0.5),
]


def _cached(out):
    """{key json: value} of every cached fit in the folder."""
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    return {json.dumps(d["key"], sort_keys=True): d["value"] for d in docs}


def _keys(out):
    return [json.loads(k) for k in _cached(out)]


# ----------------------------------------------------------------------------- no fits
def test_cache_key_layout_is_unchanged():
    """The key (and file name) of a fit are those of earlier versions: existing caches keep working."""
    (row,) = plan_grid([CELLS[0]], settings=TINY, experiment="tiny")
    task = row.units[0].candidates[1]  # eps x 0.5 = 0.05, from the spike
    expected = {
        "experiment": "tiny",
        "m": 30,
        "K": 2,
        "prior": "discrete",
        "seed": 0,
        "scale": "variance",
        "stage": "validation",
        "hyper": {"C": 1.0, "p": 0.05, "eps": 0.05},
        "settings": {
            "seeds": [0],
            "num_warmup": 5,
            "num_samples": 20,
            "thinning": 5,
            "vb_max_iter": 10,
        },
        "start": "spike",
        "init_gamma": 0.05,
    }
    assert task.key == expected
    assert task.key_json == json.dumps(expected, sort_keys=True, default=float)
    name = hashlib.sha1(json.dumps(expected, sort_keys=True, default=float).encode()).hexdigest()[
        :20
    ]
    assert execute._cache_path(Path("/x"), task).name == f"{name}.json"
    # a start that is the prior's own init_gamma is not in the key
    fixed = plan_unit(
        {"e": 1},
        SimulationData(30, 0),
        method="gibbs",
        prior="fixed",
        hyper={"gamma": 1.0},
        K=2,
        seed=0,
        settings=TINY,
    )
    assert all("start" not in t.key and t.start == "default" for t in fixed.candidates)


def test_grid_varies_the_tuned_hyper_parameter_and_skips_invalid_points():
    # discrete: eps x 2 = 0.6 >= C = 0.5 is not a valid prior: skipped
    unit = plan_unit(
        {},
        SimulationData(30, 0),
        method="gibbs",
        prior="discrete",
        hyper={"C": 0.5, "p": 0.05, "eps": 0.3},
        K=2,
        seed=0,
        settings=TINY,
    )
    assert [dict(t.hyper)["eps"] for t in unit.candidates] == [0.15, 0.15, 0.3, 0.3]
    assert [t.start for t in unit.candidates] == ["slab", "spike"] * 2
    assert [t.init_gamma for t in unit.candidates] == [0.5, 0.15, 0.5, 0.3]
    # every registered prior: its tuned hyper-parameter x 1/2, x 1, x 2, each from each Gibbs start
    for name, cls in registry().items():
        prior = cls.from_cli()
        unit = plan_unit(
            {},
            SimulationData(30, 0),
            method="gibbs",
            prior=name,
            hyper=prior.hyperparameters(),
            K=2,
            seed=0,
            settings=TINY,
        )
        starts = [label for label, _ in prior.gibbs_starts()]
        assert [t.start for t in unit.candidates] == starts * 3, name
        tuned = [dict(t.hyper)[cls.tuned_name()] for t in unit.candidates[:: len(starts)]]
        base = prior.hyperparameters()[cls.tuned_name()]
        assert tuned == [base * 0.5, base, base * 2.0], name
        # VB has one start, the default
        vb = plan_unit(
            {},
            MovieLensData("100k"),
            method="vb",
            prior=name,
            hyper=prior.hyperparameters(),
            K=2,
            seed=0,
            settings=TINY,
        )
        assert [(t.start, t.init_gamma) for t in vb.candidates] == [("default", None)] * 3


def test_invalid_base_hyper_parameters_are_an_error():
    with pytest.raises(ValueError, match="eps"):
        plan_unit(
            {},
            SimulationData(30, 0),
            method="gibbs",
            prior="discrete",
            hyper={"C": 1.0, "p": 0.05, "eps": 2.0},
            K=2,
            seed=0,
            settings=TINY,
        )
    with pytest.raises(ValueError, match="unknown prior"):
        GridCell("x", 30, 2, "no-such-prior")


def test_grid_cell_defaults_come_from_the_prior_class():
    for name, cls in registry().items():
        cell = GridCell("x", 30, 2, name)
        assert dict(cell.hyper) == cls.from_cli().hyperparameters(), name
    assert GridCell("x", 30, 2, "fixed").reference is None
    (row,) = plan_grid([GridCell("x", 30, 2, "fixed")], settings=TINY, experiment="tiny")
    assert math.isnan(row.paper)
    assert GridCell("x", 30, 2, "fixed", {"gamma": 2.0}) == GridCell(
        "x", 30, 2, "fixed", (("gamma", 2.0),)
    )


def test_tasks_are_frozen_and_hashable():
    (row,) = plan_grid([CELLS[0]], settings=TINY, experiment="tiny")
    unit = row.units[0]
    assert len({unit, unit}) == 1 and len(set(unit.candidates)) == len(unit.candidates) == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        unit.candidates[0].seed = 1


def test_select_and_summarise():
    """The best candidate, and the paper's hyper-parameters from their best start."""
    rows = plan_grid(
        [CELLS[0]], settings=dataclasses.replace(TINY, seeds=(0, 1)), experiment="tiny"
    )
    (row,) = rows
    # candidates: eps 0.05 slab/spike, 0.1 slab/spike, 0.2 slab/spike
    scores = {0: [0.9, 0.5, 0.8, 0.7, 0.6, 0.95], 1: [0.9, 0.8, 0.85, 0.7, 0.6, 0.95]}
    values = {
        t.key_json: s for u in row.units for t, s in zip(u.candidates, scores[u.candidates[0].seed])
    }
    finals = {u: select(u, values) for u in row.units}
    f0, f1 = finals[row.units[0]], finals[row.units[1]]
    assert (dict(f0.selected.hyper)["eps"], f0.selected.start, f0.selected.stage) == (
        0.05,
        "spike",
        "test",
    )
    assert (dict(f1.selected.hyper)["eps"], f1.selected.start) == (0.2, "slab")
    assert (dict(f0.paper.hyper)["eps"], f0.paper.start, f0.paper.stage) == (0.1, "spike", "test")
    for u, (sel, ref) in zip(row.units, [(0.4, 0.45), (0.6, 0.65)]):
        values[finals[u].selected.key_json], values[finals[u].paper.key_json] = sel, ref
    r = summarise(row, finals, values)
    assert (r.prior, r.method, r.paper, r.n_datasets) == ("discrete", "gibbs", 0.5, 2)
    assert r.rmse_selected == pytest.approx(0.5) and r.rmse_paper_hyper == pytest.approx(0.55)
    assert (
        list(r.selected_hyper) == ["C", "p", "eps"]
        and r.selected_hyper["eps"] == "0.05/0.2 (per dataset)"
    )
    assert r.paper_hyper == {"C": 1.0, "p": 0.05, "eps": 0.1}
    assert r.selected_start == "spike x1, slab x1" and r.paper_hyper_start == "spike"


def test_no_prior_is_named_in_the_runner():
    sources = [inspect.getsource(m) for m in (runner, tasks, execute)]
    for name in registry():
        assert all(f'"{name}"' not in s for s in sources), name


def test_bad_jobs():
    with pytest.raises(ValueError, match="jobs"):
        run_experiment("simulation-m", quick=True, jobs=0)
    with pytest.raises(ValueError, match="jobs"):
        run_grid(CELLS, jobs=True)


def test_format_table_shows_the_start():
    r = Result(
        "simulation-m",
        "m=100",
        "discrete",
        "gibbs",
        0.6,
        {"C": 1.0, "p": 0.05, "eps": 0.11},
        0.61,
        {"C": 1.0, "p": 0.05, "eps": 0.22},
        0.58,
        4,
        "spike x3, slab x1",
        "slab",
    )
    table = format_table([r])
    assert "| start |" in table.splitlines()[0]
    assert "spike x3, slab x1 (paper's hyper: slab)" in table
    assert "-0.020" in table


def test_column_moves_setting_is_keyed_only_when_on(monkeypatch):
    """``Settings(column_moves=True)`` (the default; ``reproduce --no-column-moves`` turns
    it off) puts the setting in the cache key (the plain runs' keys stay as they were,
    checked above) and passes ``column_moves=True`` to the Gibbs fits of priors that have
    a move, False to the others and to every fit of a plain run; the moves at the end of
    every sweep, whatever ``bmc.fit``'s defaults (the sampler of the documented tables)."""
    from bmczoo.experiments.tasks import FULL, QUICK

    assert FULL.column_moves and QUICK.column_moves
    assert (
        Settings(seeds=(0,), num_warmup=5, num_samples=20, thinning=5, vb_max_iter=10).column_moves
        is True
    )
    moves = dataclasses.replace(TINY, column_moves=True)
    (plain_row,) = plan_grid([CELLS[0]], settings=TINY, experiment="tiny")
    (row,) = plan_grid([CELLS[0]], settings=moves, experiment="tiny")
    plain, task = plain_row.units[0].candidates[1], row.units[0].candidates[1]
    assert (
        "column_moves" not in plain.key["settings"] and task.key["settings"]["column_moves"] is True
    )
    assert {**task.key, "settings": plain.key["settings"]} == plain.key
    assert execute._cache_path(Path("/x"), task) != execute._cache_path(Path("/x"), plain)
    seen = []

    class Stop(Exception):
        pass

    def fake_fit(train, **kw):
        seen.append((type(kw["prior"]).__name__, kw["column_moves"]))
        assert kw["column_moves_every"] == 1 and kw["fuse_column_moves"] is False
        assert kw["gamma_sampler"] == "jax"  # the cached tables' stream, whatever the default
        assert kw["row_draw"] == "two-solves"  # and their rows' rounding
        raise Stop

    monkeypatch.setattr("bmczoo.inference.fit", fake_fit)
    fixed = plan_unit(
        {"e": 1},
        SimulationData(30, 0),
        method="gibbs",
        prior="fixed",
        hyper={"gamma": 1.0},
        K=2,
        seed=0,
        settings=moves,
    )
    for t in (task, plain, fixed.candidates[0]):
        with pytest.raises(Stop):
            execute.fit_value(t)
    assert seen == [("Discrete", True), ("Discrete", False), ("Fixed", False)]


def test_priors_selects_rows(monkeypatch):
    """``run_experiment(priors=...)`` (``reproduce --priors``) keeps only those priors' cells;
    unknown names and movielens are errors naming the problem."""
    got = []
    monkeypatch.setattr(
        runner, "run_grid", lambda cells, **kw: got.append([(c.setting, c.prior) for c in cells])
    )
    run_experiment("simulation-K", priors=["discrete"])
    assert got[-1] == [(f"K={K}", "discrete") for K in (2, 5, 10, 20)]
    run_experiment("simulation-m", quick=True, priors=["fixed", "gamma"])
    assert got[-1] == [("m=100", "fixed"), ("m=100", "gamma")]
    with pytest.raises(ValueError, match="no rows for nope"):
        run_experiment("simulation-m", priors=["nope"])
    with pytest.raises(ValueError, match="simulation-m and simulation-K only"):
        run_experiment("movielens", priors=["discrete"])


# ----------------------------------------------------------------------------- tiny fits
def test_tiny_grid_by_prior_name(tmp_path):
    """Any registered prior by name, with its default hyper-parameters; the test fit of
    ``run_simulation_cell`` is the reproduction's (the same task, the same number)."""
    fast = Settings(seeds=(0,), num_warmup=3, num_samples=6, thinning=3, vb_max_iter=10)
    (row,) = run_grid(
        [GridCell("m=30", 30, 2, "fixed")], settings=fast, out=tmp_path, experiment="tiny"
    )
    assert (row.prior, row.setting, row.n_datasets, row.selected_start) == (
        "fixed",
        "m=30",
        1,
        "default",
    )
    assert row.paper_hyper == {"gamma": Fixed.cli_defaults["gamma"]} and math.isnan(row.paper)
    assert row.selected_hyper["gamma"] in (0.5, 1.0, 2.0)
    assert 0 < row.rmse_selected <= row.rmse_paper_hyper + 1e-12
    keys = _keys(tmp_path / "quick")
    assert sorted(k["stage"] for k in keys).count("validation") == 3
    cell = run_simulation_cell(30, 2, Fixed(), seeds=(0,), num_warmup=3, num_samples=6, thinning=3)
    assert cell.rmse == (row.rmse_paper_hyper,)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    return out / "quick", run_grid(CELLS, settings=TINY, out=out, jobs=1, experiment="tiny")


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
    vals = {
        (json.dumps(json.loads(k)["hyper"], sort_keys=True), json.loads(k)["start"]): v
        for k, v in _cached(out).items()
        if '"prior": "discrete"' in k and '"stage": "validation"' in k
    }
    best = min(vals, key=vals.get)
    assert best == (json.dumps(d.selected_hyper, sort_keys=True), d.selected_start)


@pytest.mark.slow
def test_rerun_reads_the_cache(serial, monkeypatch):
    out, rows = serial

    def boom(task, out):
        raise AssertionError(f"recomputed {task.key}")

    monkeypatch.setattr(execute, "compute", boom)
    assert run_grid(CELLS, settings=TINY, out=out.parent, jobs=1, experiment="tiny") == rows


@pytest.mark.slow
def test_jobs_give_identical_results(serial, tmp_path):
    """Two worker processes (spawn) give the same numbers as one process, fit by fit."""
    out, rows = serial
    par = run_grid(CELLS, settings=TINY, out=tmp_path, jobs=2, experiment="tiny")
    assert par == rows
    assert _cached(out) == _cached(tmp_path / "quick")
