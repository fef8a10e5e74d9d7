"""``reproduce movielens``: the rows beyond the paper (Normal-Wishart alone, and with learned
noise and biases) and the likelihood / biases components of a fit task.

The planning and cache-key tests run no fit; ``test_new_rows_end_to_end`` runs the new
rows on a tiny MovieLens-format file written by the test (40 users x 30 items, K = 10,
a few sweeps), reruns them from the cache and prints the table."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bmczoo.experiments import Settings, format_table
from bmczoo.experiments import execute, runner, tasks
from bmczoo.experiments.beyond import MOVIELENS_BEYOND
from bmczoo.experiments.paper import PAPER_TABLE6
from bmczoo.experiments.tasks import FitTask, MovieLensData, plan_unit
from bmczoo.likelihoods import LearnedNoise, Tempered, registry as likelihood_registry
from bmczoo.offsets import Biases
from bmczoo.priors import NormalWishart

# the paper's plain sweep: its cache keys are those of earlier versions (checked below)
FAST = Settings(
    seeds=(0,), num_warmup=3, num_samples=6, thinning=3, vb_max_iter=5, column_moves=False
)
NEW = ["normal-wishart", "normal-wishart+learned+biases"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A folder holding ``ml-100k/u.data``: 40 users x 30 items, about half of the entries
    rated 1-5 from a rank-2 matrix, tab-separated with timestamps."""
    root = tmp_path_factory.mktemp("movielens")
    rng = np.random.default_rng(0)
    theta = 3.5 + rng.normal(size=(40, 2)) @ rng.normal(size=(2, 30))
    users, items = np.nonzero(rng.random(theta.shape) < 0.5)
    ratings = np.clip(
        np.rint(theta[users, items] + 0.5 * rng.normal(size=users.size)), 1, 5
    ).astype(int)
    lines = [
        f"{u + 1}\t{i + 1}\t{r}\t{881250949 + k}"
        for k, (u, i, r) in enumerate(zip(users, items, ratings))
    ]
    (root / "ml-100k").mkdir()
    (root / "ml-100k" / "u.data").write_text("\n".join(lines) + "\n")
    return root


def _rows(data_dir, settings=FAST):
    return runner.plan_movielens(
        runner._movielens_entries(True, data_dir, False), settings=settings
    )


def _keys(folder):
    return [json.loads(p.read_text())["key"] for p in sorted(folder.glob("*.json"))]


# ----------------------------------------------------------------------------- no fits
def test_new_rows_are_planned(data_dir):
    rows = _rows(data_dir)
    labels = [(r.units[0].label, r.units[0].method) for r in rows]
    paper = [(p, m) for d, m, p, _, _ in PAPER_TABLE6 if d == "100k"]
    # the paper's rows first and unchanged, then each new model for each of the paper's methods on 100K
    assert labels == paper + [(label, method) for method in ("gibbs", "vb") for label in NEW]
    for row, (_, _, prior, hyper, value) in zip(rows, [r for r in PAPER_TABLE6 if r[0] == "100k"]):
        unit = row.units[0]
        assert (unit.prior, dict(unit.base_hyper), row.paper, unit.components) == (
            prior,
            hyper,
            value,
            (),
        )
        assert all(t.likelihood == () and t.biases == () for t in unit.candidates)
    for row in rows[len(paper) :]:
        unit = row.units[0]
        assert math.isnan(row.paper) and unit.prior == NormalWishart.name
        assert dict(unit.base_hyper) == NormalWishart.from_cli().hyperparameters()
        # the grid varies W0_scale x1/2, x1, x2; one Gibbs start, the prior's own (no init_gamma)
        assert [dict(t.hyper)["W0_scale"] for t in unit.candidates] == [0.5, 1.0, 2.0]
        assert all(
            t.init_gamma is None and t.start == "default" and t.stage == "validation"
            for t in unit.candidates
        )
        assert all("init_gamma" not in t.key and "start" not in t.key for t in unit.candidates)
    full = [r.units[0] for r in rows[len(paper) :] if r.units[0].components]
    assert [u.components for u in full] == [("learned", "biases")] * 2
    assert all(
        t.build_likelihood() == LearnedNoise() and t.build_biases() == Biases()
        for u in full
        for t in u.candidates
    )
    # the rows beyond the paper are exactly those of MOVIELENS_BEYOND
    assert len(rows) == len(paper) + 2 * len(MOVIELENS_BEYOND)


def test_paper_row_keys_are_unchanged(data_dir):
    """A paper row's cache key has no likelihood or biases entry (the layout of earlier versions)."""
    task = _rows(data_dir)[1].units[0].candidates[0]  # inverse gamma, Gibbs, b x 1/2
    assert task.key == {
        "experiment": "movielens",
        "dataset": "100k",
        "method": "gibbs",
        "prior": "inverse-gamma",
        "K": 10,
        "seed": 0,
        "stage": "validation",
        "hyper": {"a": 1.0, "b": 0.05},
        "settings": {
            "seeds": [0],
            "num_warmup": 3,
            "num_samples": 6,
            "thinning": 3,
            "vb_max_iter": 5,
        },
        "start": "gamma=1",
        "init_gamma": 1.0,
    }
    assert task.build_likelihood() is None and task.build_biases() is None


def test_cache_key_changes_with_likelihood_and_biases():
    common = dict(
        tag=(("experiment", "x"),),
        data=MovieLensData("100k"),
        stage="validation",
        method="gibbs",
        prior=NormalWishart.name,
        hyper=(("W0_scale", 1.0),),
        K=2,
        seed=0,
        settings=FAST,
    )
    base = FitTask(**common)
    # the paper's likelihood given explicitly is the default: same task, same key
    assert FitTask(**common, likelihood=Tempered()) == base
    assert FitTask(**common, likelihood=Tempered().describe(), biases=False) == base
    variants = [
        base,
        FitTask(**common, likelihood=LearnedNoise()),
        FitTask(**common, likelihood=LearnedNoise(a=2.0)),
        FitTask(**common, likelihood=Tempered(noise_sd=0.5)),
        FitTask(**common, biases=True),
        FitTask(**common, biases=Biases(a=2.0)),
        FitTask(**common, likelihood=LearnedNoise(), biases=True),
    ]
    keys = [t.key_json for t in variants]
    assert len(set(keys)) == len(keys)
    assert len({execute._cache_path(Path("/x"), t) for t in variants}) == len(keys)
    full = variants[-1]
    assert full.key["likelihood"] == {"name": "learned", "a": 1.0, "b": 1.0, "temper": 1.0}
    assert full.key["biases"] == {"name": "biases", "a": 1.0, "b": 1.0}
    assert full.components == ("learned", "biases") and base.components == ()
    # plain, frozen, hashable values that rebuild the components
    assert all(isinstance(v, tuple) for v in (full.likelihood, full.biases))
    assert hash(full) == hash(dataclasses.replace(full))
    assert variants[2].build_likelihood() == LearnedNoise(a=2.0)
    assert variants[3].build_likelihood() == Tempered(noise_sd=0.5)
    assert variants[5].build_biases() == Biases(a=2.0)
    # a unit carries its components, the label joins their names
    unit = plan_unit(
        {},
        MovieLensData("100k"),
        method="vb",
        prior=NormalWishart.name,
        hyper={"W0_scale": 1.0},
        K=2,
        seed=0,
        settings=FAST,
        likelihood=LearnedNoise(),
        biases=True,
    )
    assert unit.label == "normal-wishart+learned+biases"
    assert all(t.key["likelihood"]["name"] == "learned" for t in unit.candidates)


def test_no_component_or_prior_name_is_compared_in_the_experiments():
    """The runner, tasks and execution never branch on a prior's or component's name: no
    comparison (``==``, ``!=``, ``in``, ...) involves a registered name as a literal."""
    import ast
    import inspect

    from bmczoo.priors import registry as prior_registry

    names = {*prior_registry(), *likelihood_registry(), Biases.name}
    for module in (runner, tasks, execute):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Compare):
                literals = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                assert not literals & names, (module.__name__, ast.unparse(node))


def test_table_prints_rows_beyond_the_paper():
    r = runner.Result(
        "movielens",
        "100k",
        "normal-wishart",
        "gibbs",
        math.nan,
        {"beta0": 2.0, "W0_scale": 1.0},
        0.91,
        {"beta0": 2.0, "W0_scale": 2.0},
        0.905,
        1,
        components=("learned", "biases"),
    )
    line = format_table([r]).splitlines()[-1]
    assert line == (
        "| 100k | normal-wishart+learned+biases | gibbs | — | 0.905 | beta0=2, W0_scale=2 | default "
        "| — | 0.910 |"
    )
    assert math.isnan(r.diff) and "nan" not in format_table([r])


# ----------------------------------------------------------------------------- tiny fits
@pytest.fixture(scope="module")
def new_rows_run(data_dir, tmp_path_factory):
    """The new rows of ``reproduce movielens --quick`` (planned as the command plans them),
    run with tiny settings; the paper's rows are left out (the other tests run them).

    Every fit compiles its own sampler (a prior's hyper-parameters are static), so the grid
    is cut to its centre (x1) here: one validation and one test fit per row, 8 fits; the
    three-point grid is checked by :func:`test_new_rows_are_planned`."""
    out = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setattr(tasks, "GRID_FACTORS", (1.0,))
    try:
        rows = [r for r in _rows(data_dir) if math.isnan(r.paper)]
    finally:
        mp.undo()
    return out, rows, runner._run_rows(rows, out, 1, False)


@pytest.mark.slow
def test_new_rows_end_to_end(new_rows_run):
    out, rows, results = new_rows_run
    assert [(r.label, r.method) for r in results] == [
        (label, m) for m in ("gibbs", "vb") for label in NEW
    ]
    for r in results:
        assert math.isnan(r.paper) and math.isnan(r.diff) and r.n_datasets == 1
        assert r.selected_start == r.paper_hyper_start == "default"
        assert r.selected_hyper == r.paper_hyper == NormalWishart.from_cli().hyperparameters()
        assert 0 < r.rmse_selected == r.rmse_paper_hyper < 5
    keys = _keys(out)
    # one validation and one test fit per row, each its own cache entry
    assert sorted(k["stage"] for k in keys) == ["test"] * len(rows) + ["validation"] * len(rows)
    assert sum("likelihood" in k and "biases" in k for k in keys) == 2 * 2
    assert all("init_gamma" not in k and "start" not in k for k in keys)
    assert {k["method"] for k in keys} == {"gibbs", "vb"}
    table = format_table(results)
    print("\n" + table)
    for label in NEW:
        assert (
            f"| 100k | {label} | gibbs | — |" in table and f"| 100k | {label} | vb | — |" in table
        )


@pytest.mark.slow
def test_new_rows_resume_from_the_cache(new_rows_run, monkeypatch):
    out, rows, results = new_rows_run

    def boom(task, out):
        raise AssertionError(f"recomputed {task.key}")

    monkeypatch.setattr(execute, "compute", boom)
    assert runner._run_rows(rows, out, 1, False) == results
    # an interrupted run: the missing fit (and only it) is computed again
    monkeypatch.undo()
    files = sorted(out.glob("*.json"))
    victim = next(p for p in files if json.loads(p.read_text())["key"].get("likelihood"))
    victim.unlink()
    computed = []
    real = execute.compute

    def counting(task, out):
        computed.append(task.key)
        return real(task, out)

    monkeypatch.setattr(execute, "compute", counting)
    again = runner._run_rows(rows, out, 1, False)
    assert len(computed) == 1 and computed[0]["likelihood"]["name"] == "learned"
    assert victim.exists() and again == results  # each fit is seeded by its task
