"""``bmczoo fit --save``, ``bmczoo predict`` and ``bmczoo recommend``:
saved models spoken to in the dataset's own ids; every error one line, exit code 2."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import main
from bmczoo.inference.saving import load_extra

from test_cli_errors import FAST, no_fit, one_line_error, write_ratings  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A VB model of a ratings file whose ids are not indices (users 1000 + 7u, items 50 + 3i)."""
    d = tmp_path_factory.mktemp("model")
    table = write_ratings(d / "small.data")
    assert (
        main(["fit", "--data", str(d / "small.data"), *FAST, "--save", str(d / "model.npz")]) == 0
    )
    return d, table


def _csv(text: str):
    return list(csv.DictReader(io.StringIO(text)))


def test_fit_save_keeps_the_ids(saved):
    d, table = saved
    extra = load_extra(d / "model.npz")
    np.testing.assert_array_equal(extra["user_ids"], np.unique(table[:, 0]))
    np.testing.assert_array_equal(extra["item_ids"], np.unique(table[:, 1]))


def test_predict_in_dataset_ids(saved, capsys):
    d, table = saved
    pairs = table[:6, :2]
    (d / "pairs.csv").write_text("user,item\n" + "\n".join(f"{u},{i}" for u, i in pairs) + "\n")
    capsys.readouterr()
    assert (
        main(
            [
                "predict",
                "--model",
                str(d / "model.npz"),
                "--entries",
                str(d / "pairs.csv"),
                "--prob",
                "0.8",
            ]
        )
        == 0
    )
    rows = _csv(capsys.readouterr().out)
    assert list(rows[0]) == ["user_id", "item_id", "mean", "sd", "lo80", "hi80"]
    assert [(int(r["user_id"]), int(r["item_id"])) for r in rows] == [tuple(p) for p in pairs]
    fit = bmczoo.load(d / "model.npz")
    extra = load_extra(d / "model.npz")
    ri = np.searchsorted(extra["user_ids"], pairs[:, 0])
    ci = np.searchsorted(extra["item_ids"], pairs[:, 1])
    mean, sd = fit.predict(ri, ci, return_std=True)
    np.testing.assert_allclose([float(r["mean"]) for r in rows], mean, atol=1e-6)
    np.testing.assert_allclose([float(r["sd"]) for r in rows], sd, atol=1e-6)
    lo, hi = (np.array([float(r[k]) for r in rows]) for k in ("lo80", "hi80"))
    assert np.all(lo <= mean + 1e-6) and np.all(mean <= hi + 1e-6)


def test_recommend_in_dataset_ids(saved, capsys):
    d, table = saved
    user = int(table[0, 0])
    capsys.readouterr()
    assert (
        main(
            [
                "recommend",
                "--model",
                str(d / "model.npz"),
                "--user",
                str(user),
                "-n",
                "4",
                "--by",
                "upper",
            ]
        )
        == 0
    )
    rows = _csv(capsys.readouterr().out)
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4]
    items = {int(r["item_id"]) for r in rows}
    fit = bmczoo.load(d / "model.npz")
    assert items <= set(load_extra(d / "model.npz")["item_ids"].tolist())
    # training ratings are left out (the model keeps the training pattern)
    extra = load_extra(d / "model.npz")
    row = int(np.searchsorted(extra["user_ids"], user))
    seen = set(extra["item_ids"][fit.seen_cols[fit.seen_rows == row]].tolist())
    assert not items & seen
    scores = [float(r["score"]) for r in rows]
    assert scores == sorted(scores, reverse=True)


def test_save_path_checked_before_the_fit(tmp_path, capsys, no_fit):  # noqa: F811
    write_ratings(tmp_path / "r.data")
    (tmp_path / "model.npz").write_text("earlier")
    assert (
        main(
            [
                "fit",
                "--data",
                str(tmp_path / "r.data"),
                *FAST,
                "--save",
                str(tmp_path / "model.npz"),
            ]
        )
        == 2
    )
    one_line_error(capsys, "--save", "existing file", "--overwrite")
    (tmp_path / "afile").write_text("x")
    assert (
        main(
            [
                "fit",
                "--data",
                str(tmp_path / "r.data"),
                *FAST,
                "--save",
                str(tmp_path / "afile" / "m.npz"),
            ]
        )
        == 2
    )
    one_line_error(capsys, "--save", "not a folder")
    assert main(["fit", "--data", str(tmp_path / "r.data"), *FAST, "--save", str(tmp_path)]) == 2
    one_line_error(capsys, "--save", "folder")
    assert no_fit == []


@pytest.mark.parametrize(
    "case", ["unknown-user", "unknown-item", "bad-line", "no-model", "not-a-model", "bad-prob"]
)
def test_predict_errors_are_one_line(saved, tmp_path, capsys, case):
    d, table = saved
    u, i = int(table[0, 0]), int(table[0, 1])
    model, entries, extra = str(d / "model.npz"), tmp_path / "pairs.csv", []
    text = {
        "unknown-user": f"1,{i}\n",
        "unknown-item": f"{u},2\n",
        "bad-line": f"{u},{i}\n{u},x\n",
    }.get(case, f"{u},{i}\n")
    entries.write_text(text)
    if case == "no-model":
        model = str(tmp_path / "missing.npz")
    if case == "not-a-model":
        model = str(entries)
    if case == "bad-prob":
        extra = ["--prob", "1.5"]
    capsys.readouterr()
    assert main(["predict", "--model", model, "--entries", str(entries), *extra]) == 2
    needle = {
        "unknown-user": "unknown user id 1",
        "unknown-item": "unknown item id 2",
        "bad-line": "line 2",
        "no-model": "no such file",
        "not-a-model": "not a saved bmczoo fit",
        "bad-prob": "--prob",
    }[case]
    one_line_error(capsys, needle)


def test_recommend_unknown_user_is_one_line(saved, capsys):
    d, _ = saved
    capsys.readouterr()
    assert main(["recommend", "--model", str(d / "model.npz"), "--user", "3"]) == 2
    one_line_error(capsys, "unknown user id 3")


def test_recommend_by_top_k_probability(saved, capsys):
    """``--by top-k``: the fit's ``recommend(by="top-k")`` with ``--seed`` and
    ``--num-draws``, in the dataset's ids, scores the probabilities."""
    d, table = saved
    user = int(table[0, 0])
    capsys.readouterr()
    argv = ["recommend", "--model", str(d / "model.npz"), "--user", str(user), "-n", "3"]
    assert main(argv + ["--by", "top-k", "--seed", "2", "--num-draws", "5"]) == 0
    rows = _csv(capsys.readouterr().out)
    fit = bmczoo.load(d / "model.npz")
    extra = load_extra(d / "model.npz")
    row = int(np.searchsorted(extra["user_ids"], user))
    items, scores = fit.recommend([row], n=3, by="top-k", seed=2, num_draws=5)
    assert [int(r["item_id"]) for r in rows] == extra["item_ids"][items[0]].tolist()
    np.testing.assert_allclose([float(r["score"]) for r in rows], scores[0], atol=1e-6)
    assert main(argv + ["--by", "top-k", "--num-draws", "0"]) == 2
    assert "--num-draws must be at least 1" in capsys.readouterr().err
