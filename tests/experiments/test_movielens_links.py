"""The experiments with feature links: a fit task whose Normal-Wishart prior uses the
dataset's side tables and implicit feedback (``links=``), planned for MovieLens data loaded
with its side files (``run_experiment("movielens", features=True)``,
:data:`~bmczoo.experiments.beyond.MOVIELENS_LINKED`).

The planning and cache-key tests run no fit; ``test_linked_row_end_to_end`` runs the linked
Gibbs row on a tiny MovieLens-format folder written here (40 users x 30 items with
``u.user``, ``u.item`` and ``u.genre``); the test on the real ML-100K files is skipped when
they are absent."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bmczoo.experiments import MOVIELENS_LINKED, Settings, format_table
from bmczoo.experiments import runner, tasks
from bmczoo.experiments.tasks import FitTask, MovieLensData, links_pairs, plan_unit
from bmczoo.likelihoods import LearnedNoise
from bmczoo.offsets import Biases
from bmczoo.priors import NormalWishart

FAST = Settings(
    seeds=(0,), num_warmup=3, num_samples=6, thinning=3, vb_max_iter=5, column_moves=False
)
LABEL = "normal-wishart+side+implicit+learned+biases"
OCCUPATIONS = ("writer", "other", "technician", "student")
GENRES = ("unknown", "Action", "Comedy", "Drama")


def _write_ml100k(root: Path, side: bool) -> Path:
    """``root/ml-100k``: 40 users x 30 items, about half of the entries rated 1-5 from a
    rank-2 matrix, and (``side``) the users' and movies' tables in ML-100K's format."""
    rng = np.random.default_rng(0)
    theta = 3.5 + rng.normal(size=(40, 2)) @ rng.normal(size=(2, 30))
    users, items = np.nonzero(rng.random(theta.shape) < 0.5)
    ratings = np.clip(np.rint(theta[users, items] + 0.5 * rng.normal(size=users.size)), 1, 5)
    folder = root / "ml-100k"
    folder.mkdir(parents=True)
    (folder / "u.data").write_text(
        "".join(
            f"{u + 1}\t{i + 1}\t{int(r)}\t{881250949 + k}\n"
            for k, (u, i, r) in enumerate(zip(users, items, ratings))
        )
    )
    if side:
        (folder / "u.user").write_text(
            "".join(
                f"{u + 1}|{18 + 2 * u}|{'MF'[u % 2]}|{OCCUPATIONS[u % 4]}|{10000 + 37 * u}\n"
                for u in range(40)
            )
        )
        flags = ["|".join("1" if g == i % 4 else "0" for g in range(19)) for i in range(30)]
        (folder / "u.item").write_bytes(
            "".join(
                f"{i + 1}|Movie {i} ({1980 + i})|01-Jan-{1980 + i}||http://x|{flags[i]}\n"
                for i in range(30)
            ).encode("latin-1")
        )
        names = list(GENRES) + [f"g{k}" for k in range(4, 19)]
        (folder / "u.genre").write_text("".join(f"{g}|{k}\n" for k, g in enumerate(names)))
    return root


@pytest.fixture(scope="module")
def side_dir(tmp_path_factory):
    return _write_ml100k(tmp_path_factory.mktemp("movielens_side"), side=True)


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory):
    return _write_ml100k(tmp_path_factory.mktemp("movielens_plain"), side=False)


def _linked_rows(data_dir, features=True):
    entries = runner._movielens_entries(True, data_dir, False, features)
    return [r for r in runner.plan_movielens(entries, settings=FAST) if r.units[0].label == LABEL]


# ----------------------------------------------------------------------------- no fits
def test_links_are_plain_normalised_pairs():
    assert links_pairs(None) == links_pairs({}) == ()
    assert links_pairs({"implicit": "rows", "row_features": True, "col_features": False}) == (
        ("implicit", "rows"),
        ("row_features", True),
    )
    with pytest.raises(ValueError, match="unknown keyword 'side'"):
        links_pairs({"side": True})
    with pytest.raises(ValueError, match="implicit must be one of"):
        links_pairs({"implicit": "both"})
    with pytest.raises(ValueError, match="row_features must be one of"):
        links_pairs({"row_features": 1})  # the data's table is True, nothing else


def test_a_linked_task_has_its_own_key_and_builds_the_linked_prior():
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
        likelihood=LearnedNoise(),
        biases=True,
    )
    plain = FitTask(**common)
    linked = FitTask(**common, links={"row_features": True, "col_features": True, "implicit": True})
    # no link: the key has no "links" entry (the keys of earlier versions)
    assert "links" not in plain.key and FitTask(**common, links={}) == plain
    assert linked.key["links"] == {"col_features": True, "implicit": True, "row_features": True}
    assert linked.key_json != plain.key_json
    prior = linked.build_prior()
    assert prior.linked_sides == ("M", "N") and prior.W0_scale == 1.0
    assert plain.build_prior().linked_sides == ()
    assert linked.components == ("side", "implicit", "learned", "biases")
    rows_only = FitTask(**common, links={"implicit": "cols", "row_features": True})
    assert rows_only.components[:2] == ("side-rows", "implicit-cols")
    # links given among the hyper-parameters are the unit's links, the same at every grid
    # point (not varied, not in base_hyper); a prior without links is refused
    unit = plan_unit(
        {},
        MovieLensData("100k"),
        method="vb",
        prior=NormalWishart.name,
        hyper={"W0_scale": 1.0, "implicit": True},
        K=2,
        seed=0,
        settings=FAST,
    )
    assert unit.label == "normal-wishart+implicit" and dict(unit.base_hyper) == {"W0_scale": 1.0}
    assert [dict(t.hyper) for t in unit.candidates] == [{"W0_scale": w} for w in (0.5, 1.0, 2.0)]
    assert all(dict(t.links) == {"implicit": True} for t in unit.candidates)
    with pytest.raises(ValueError, match="inverse-gamma prior has no feature links"):
        plan_unit(
            {},
            MovieLensData("100k"),
            method="gibbs",
            prior="inverse-gamma",
            hyper={"a": 1.0, "b": 0.1, "implicit": True},
            K=2,
            seed=0,
            settings=FAST,
        )


def test_linked_rows_are_planned_where_the_side_tables_are(side_dir, plain_dir):
    rows = _linked_rows(side_dir)
    assert [r.units[0].method for r in rows] == ["gibbs", "vb"]
    for row in rows:
        unit = row.units[0]
        assert math.isnan(row.paper)
        assert all(
            t.build_likelihood() == LearnedNoise()
            and t.build_biases() == Biases()
            and dict(t.links) == MOVIELENS_LINKED[0][4]
            for t in unit.candidates
        )
    # the loaded data carry the side tables (the linked prior reads them as True)
    train = runner.prepared(rows[0].units[0].candidates[0].data).inner
    assert train.row_features.n_rows == 40 and train.col_features.n_rows == 30
    # not asked for, or no side tables beside the ratings: no linked row
    assert _linked_rows(side_dir, features=False) == []
    assert _linked_rows(plain_dir) == []
    with pytest.raises(ValueError, match="features=True adds rows to movielens only"):
        runner.run_experiment("simulation-m", features=True)


@pytest.mark.requires_ml100k("u.data", "u.user", "u.item", "u.genre")
def test_linked_rows_on_the_real_ml100k(ml100k, tmp_path):
    """ML-100K read with its side files: the linked rows are planned, the tables attached."""
    (tmp_path / "ml-100k").symlink_to(ml100k.resolve(), target_is_directory=True)
    rows = _linked_rows(tmp_path)  # the runner reads <data_dir>/ml-100k
    assert [r.units[0].method for r in rows] == ["gibbs", "vb"]
    train = runner.prepared(rows[0].units[0].candidates[0].data).train
    assert train.shape == (943, 1682)
    assert train.row_features.n_rows == 943 and train.col_features.n_rows == 1682


def test_a_variant_keeping_the_name_does_not_replace_the_prior():
    """A subclass that keeps the Normal-Wishart prior's name (as the Geweke tests' deliberately
    wrong link does) leaves ``"normal-wishart"`` to the zoo's class: a task builds the real
    prior whatever else the process defined."""

    @dataclasses.dataclass(frozen=True)
    class Variant(NormalWishart):
        pass

    assert Variant.name == NormalWishart.name
    assert tasks.prior_class(NormalWishart.name) is NormalWishart


# ----------------------------------------------------------------------------- a tiny fit
def test_linked_row_end_to_end(side_dir, tmp_path, monkeypatch):
    """The linked Gibbs row (its grid cut to the centre: one validation and one test fit)
    runs, is cached with its links in the key, and prints under its label."""
    monkeypatch.setattr(tasks, "GRID_FACTORS", (1.0,))
    rows = [r for r in _linked_rows(side_dir) if r.units[0].method == "gibbs"]
    monkeypatch.undo()
    (result,) = runner._run_rows(rows, tmp_path, 1, False)
    assert result.label == LABEL and 0 < result.rmse_selected < 5
    keys = [json.loads(p.read_text())["key"] for p in sorted(tmp_path.glob("*.json"))]
    assert sorted(k["stage"] for k in keys) == ["test", "validation"]
    assert all(k["links"] == MOVIELENS_LINKED[0][4] for k in keys)
    assert f"| 100k | {LABEL} | gibbs | — |" in format_table([result])


def test_feature_driven_biases_in_a_task():
    """Biases with feature links become plain keywords in a task (its cache key and label
    hold no array) and are rebuilt as the same component; a table of their own is refused."""
    from bmczoo.data import Features

    for biases in (
        Biases(row_features=True, implicit="cols"),
        Biases(col_features=True, implicit=True, a_w=2.0),
        Biases(),
    ):
        pairs = tasks.biases_pairs(biases)
        hash(pairs)  # a task is hashable
        json.dumps(dict(pairs))  # and its cache key plain JSON
        assert Biases(**tasks._settings_of(pairs)) == biases
    with pytest.raises(ValueError, match="data's row_features"):
        tasks.biases_pairs(Biases(row_features=Features.from_dense(np.eye(3))))
