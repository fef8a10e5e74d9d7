"""``bmczoo fit`` with a per-user test split and ``--top-n``: the printed and saved top-N
metrics are :func:`bmczoo.evaluation.ranking_metrics` (and ``per_user_ranking`` /
``metric_posterior``) of the same fit on the same split; bad options are one-line errors
before the fit."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import main
from bmczoo.datasets import read_ratings
from bmczoo.evaluation import metric_posterior, per_user_ranking, ranking_metrics

from test_cli_errors import FAST, no_fit, one_line_error, write_ratings  # noqa: F401 - fixture

GIBBS = ["-K", "2", "--num-warmup", "15", "--num-samples", "20", "--quiet"]
METRICS = ("precision", "recall", "ndcg", "map", "auc")


def write_clicks(path, n_users: int = 24, n_items: int = 18, seed: int = 0) -> None:
    """An implicit-feedback file: ``user item 1`` lines of a low-rank pattern, with ids that
    are not indices (user 500 + 3u, item 10 + 2i)."""
    rng = np.random.default_rng(seed)
    u, v = rng.random((n_users, 2)), rng.random((n_items, 2))
    rows, cols = np.nonzero(u @ v.T > 0.6)
    lines = [f"{500 + 3 * r}\t{10 + 2 * c}\t1" for r, c in zip(rows, cols)]
    path.write_text("\n".join(lines) + "\n")


def _recording(fits: list):
    """``bmczoo.fit`` that appends ``(fit, train, test)`` of each call to ``fits``."""
    real = bmczoo.fit

    def recording(train, *args, **kwargs):
        result = real(train, *args, **kwargs)
        fits.append((result, train, kwargs["test"]))
        return result

    return recording


@pytest.fixture
def captured(monkeypatch):
    """The fits run by the command line, with the data they were given."""
    fits = []
    monkeypatch.setattr(bmczoo, "fit", _recording(fits))
    return fits


def _printed(out: str) -> dict:
    """The ``name=value`` lines printed (values as floats, the posterior lines as text)."""
    lines = {}
    for line in out.strip().splitlines():
        key, sep, value = line.partition("=")
        if sep and " " not in key:
            lines[key] = value
    return lines


@pytest.fixture(scope="module")
def one_class_run(tmp_path_factory):
    """A one-class Gibbs fit with a per-user split (25% of each user, split seed 3) and
    ``--top-n 4``; its outputs, and the fit with its data recorded."""
    d = tmp_path_factory.mktemp("topn")
    write_clicks(d / "clicks.tsv")
    fits = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bmczoo, "fit", _recording(fits))
        capture = _Capture()
        with capture:
            rc = main(
                [
                    "fit",
                    "--data",
                    str(d / "clicks.tsv"),
                    "--likelihood",
                    "one-class",
                    "--split",
                    "per-user",
                    "--test-fraction",
                    "0.25",
                    "--split-seed",
                    "3",
                    "--top-n",
                    "4",
                    "--top-n-draws",
                    "6",
                    "--seed",
                    "2",
                    *GIBBS,
                    "--out",
                    str(d / "out"),
                ]
            )
    assert rc == 0
    ((fit, train, test),) = fits
    return d, capture.text, fit, train, test


class _Capture:
    """stdout of a block (a module-scoped fixture cannot use capsys)."""

    def __enter__(self):
        import contextlib
        import io

        self._buf = io.StringIO()
        self._cm = contextlib.redirect_stdout(self._buf)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        self.text = self._buf.getvalue()


def test_per_user_split_is_split_per_user_with_the_split_seed(one_class_run):
    d, _, _, train, test = one_class_run
    data = read_ratings(d / "clicks.tsv")
    want_train, want_test = data.split_per_user(0.25, seed=3)
    for got, want in ((train, want_train), (test, want_test)):
        np.testing.assert_array_equal(got.rows, want.rows)
        np.testing.assert_array_equal(got.cols, want.cols)


def test_one_class_prints_the_ranking_metrics_and_ndcg_last(one_class_run):
    _, out, fit, train, test = one_class_run
    want = ranking_metrics(fit, train, test, k=4)
    lines = out.strip().splitlines()
    assert lines[-1] == f"test_ndcg@4={want['ndcg']:.4f}"
    assert not any(line.startswith("test_rmse=") for line in lines)
    printed = _printed(out)
    for metric in ("precision", "recall", "map"):
        assert printed[f"test_{metric}@4"] == f"{want[metric]:.4f}"
    assert printed["test_auc"] == f"{want['auc']:.4f}"
    assert [line for line in lines if line.startswith("test_ndcg@4=")] == [lines[-1]]
    assert "0.25 of each user's pairs held out, split seed 3" in lines[0]


def test_topn_json_holds_the_metrics_of_ranking_metrics(one_class_run):
    d, _, fit, train, test = one_class_run
    doc = json.loads((d / "out" / "topn.json").read_text())
    want = ranking_metrics(fit, train, test, k=4)
    assert doc["k"] == 4
    assert doc["split"] == {"fraction": 0.25, "per_user": True, "count": None, "seed": 3}
    for metric in METRICS + ("users", "auc_users"):
        assert doc["metrics"][metric] == pytest.approx(want[metric], rel=1e-12, abs=1e-15)


def test_per_user_csv_and_posterior_summary(one_class_run):
    d, out, fit, train, test = one_class_run
    users, values = per_user_ranking(fit, train, test, k=4)
    with open(d / "out" / "topn_per_user.csv") as f:
        table = list(csv.DictReader(f))
    _, user_ids, _ = read_ratings(d / "clicks.tsv", return_ids=True)
    np.testing.assert_array_equal([int(r["user_id"]) for r in table], user_ids[users])
    got = np.array(
        [[float(r[f"test_{m}@4" if m != "auc" else "test_auc"]) for m in METRICS] for r in table]
    )
    np.testing.assert_allclose(got, values, rtol=1e-9, equal_nan=True)
    # the posterior: metric_posterior's draws with --seed, each user's mean and 90% interval
    post = metric_posterior(fit, train, test, k=4, num_draws=6, seed=2, users=users)
    mean = post["draws"].mean(0)
    lo, hi = np.quantile(post["draws"], [0.05, 0.95], axis=0)
    doc = json.loads((d / "out" / "topn.json").read_text())["posterior"]
    assert doc["num_draws"] == 6 and doc["prob"] == 0.9
    lines = out.splitlines()
    for j, metric in enumerate(METRICS):
        s = doc["summary"][metric]
        for key, arr in (("mean", mean), ("lo", lo), ("hi", hi)):
            assert s[key] == pytest.approx(np.nanmean(arr[:, j]), rel=1e-9)
        label = f"test_{metric}@4" if metric != "auc" else "test_auc"
        assert float(table[0][f"{label}_mean"]) == pytest.approx(mean[0, j], rel=1e-9)
        line = f"{label}_posterior: mean={s['mean']:.4f} interval=[{s['lo']:.4f}, {s['hi']:.4f}]"
        assert line in lines


def test_gaussian_fit_prints_topn_before_rmse(tmp_path, capsys, captured):
    """Explicit ratings, uniform split (the default): the top-N lines, then test_rmse; VB
    keeps a posterior (its q), --top-n-draws 0 turns the posterior off."""
    write_ratings(tmp_path / "r.data")
    argv = ["fit", "--data", str(tmp_path / "r.data"), *FAST, "--top-n", "3"]
    assert main([*argv, "--top-n-draws", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    fit, train, test = captured[-1]
    want = ranking_metrics(fit, train, test, k=3)
    assert lines[-1].startswith("test_rmse=")
    assert lines[-1] == f"test_rmse={fit.rmse(test):.4f}"
    printed = _printed("\n".join(lines))
    for metric in METRICS:
        key = f"test_{metric}@3" if metric != "auc" else "test_auc"
        assert printed[key] == f"{want[metric]:.4f}"
    assert not any("_posterior" in line for line in lines)
    assert test.n == round(0.2 * (train.n + test.n))  # the uniform split, as before


def test_test_count_holds_out_that_many_per_user(tmp_path, capsys, captured):
    write_ratings(tmp_path / "r.data", n=300)
    argv = ["fit", "--data", str(tmp_path / "r.data"), *FAST, "--split", "per-user"]
    assert main([*argv, "--test-count", "2", "--top-n", "3", "--out", str(tmp_path / "o")]) == 0
    _, train, test = captured[-1]
    per_user = np.bincount(test.rows, minlength=train.shape[0])
    have = np.bincount(train.rows, minlength=train.shape[0]) + per_user
    np.testing.assert_array_equal(per_user, np.minimum(2, np.maximum(have - 1, 0)))
    doc = json.loads((tmp_path / "o" / "topn.json").read_text())
    assert doc["split"]["count"] == 2 and doc["posterior"]["num_draws"] == 20


def test_map_has_no_posterior(tmp_path, capsys, captured):
    write_clicks(tmp_path / "c.tsv")
    argv = ["fit", "--data", str(tmp_path / "c.tsv"), "--likelihood", "one-class", "-K", "2"]
    argv += ["--method", "map", "--num-steps", "30", "--quiet", "--split", "per-user"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    fit, train, test = captured[-1]
    assert lines[-1] == f"test_ndcg@10={ranking_metrics(fit, train, test, k=10)['ndcg']:.4f}"
    assert not any("_posterior" in line for line in lines)


def test_overwrite_without_topn_removes_the_stale_files(tmp_path, capsys):
    write_ratings(tmp_path / "r.data")
    out = tmp_path / "out"
    base = ["fit", "--data", str(tmp_path / "r.data"), *FAST, "--out", str(out)]
    assert main([*base, "--top-n", "2"]) == 0
    assert (out / "topn.json").is_file() and (out / "topn_per_user.csv").is_file()
    assert main(base) == 2  # an earlier fit's files: refused
    one_line_error(capsys, "topn.json")
    assert main([*base, "--overwrite"]) == 0
    assert not (out / "topn.json").exists() and not (out / "topn_per_user.csv").exists()


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--top-n", "0"], ["--top-n K", "at least 1"]),
        (["--top-n", "3", "--top-n-draws", "-1"], ["--top-n-draws", ">= 0"]),
        (["--top-n-draws", "5"], ["--top-n-draws needs --top-n"]),
        (["--test-count", "2"], ["--test-count", "--split per-user"]),
        (["--split", "per-user", "--test-count", "0"], ["--test-count", "at least 1"]),
        (["--split-seed", "-1"], ["--split-seed", ">= 0"]),
        (["--top-n", "3", "--store-factors", "no"], ["--top-n", "--store-factors no"]),
        (["--split", "per-user", "--test-fraction", "1.5"], ["--test-fraction", "(0, 1)"]),
    ],
)
def test_bad_topn_options_are_one_line_errors_before_the_fit(
    tmp_path,
    capsys,
    no_fit,  # noqa: F811
    extra,
    needles,
):
    write_ratings(tmp_path / "r.data")
    argv = ["fit", "--data", str(tmp_path / "r.data"), "-K", "2", "--quiet", *extra]
    assert main(argv) == 2
    one_line_error(capsys, *needles, "(see 'bmczoo fit --help')")
    assert not no_fit


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--top-n", "3"], ["--top-n needs ratings data", "sim:M"]),
        (["--split", "per-user"], ["--split per-user", "simulator"]),
    ],
)
def test_simulator_has_no_topn(capsys, no_fit, extra, needles):  # noqa: F811
    assert main(["fit", "--data", "sim:20", "-K", "2", "--quiet", *extra]) == 2
    one_line_error(capsys, *needles)
    assert not no_fit


def test_topn_longer_than_the_items_and_empty_split(tmp_path, capsys, no_fit):  # noqa: F811
    write_ratings(tmp_path / "r.data", n_items=20)
    assert main(["fit", "--data", str(tmp_path / "r.data"), *FAST, "--top-n", "21"]) == 2
    one_line_error(capsys, "--top-n 21 exceeds the number of items (20)")
    (tmp_path / "one.tsv").write_text("1\t1\t1\n2\t2\t1\n3\t1\t1\n")  # one pair per user
    argv = ["fit", "--data", str(tmp_path / "one.tsv"), *FAST, "--split", "per-user"]
    assert main(argv) == 2
    one_line_error(capsys, "--split per-user", "holds out no pair")
    assert not no_fit
