"""``bmczoo fit --likelihood probit | ordered-probit``: ``--binarize``,
``--likelihood-opt``, the printed test metrics, the probability columns of
predictions.csv and of ``bmczoo predict``."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import main

from test_cli_errors import FAST, no_fit, one_line_error, write_ratings  # noqa: F401 - fixture


def _csv(text: str):
    return list(csv.DictReader(io.StringIO(text)))


def _metrics(out: str) -> dict:
    return {
        k: float(v)
        for k, _, v in (
            line.partition("=")
            for line in out.splitlines()
            if "=" in line and line.startswith("test_")
        )
    }


def test_help_names_the_latent_likelihoods(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in (
        "probit",
        "ordered-probit",
        "--binarize THRESHOLD",
        "threshold=? (probit)",  # its settings and defaults, from the classes
        "levels=?, cut_scale=2",
    ):
        assert needle in text


def test_probit_with_binarize_prints_classification_metrics(tmp_path, capsys):
    write_ratings(tmp_path / "small.data")
    rc = main(
        [
            "fit",
            "--data",
            str(tmp_path / "small.data"),
            "--likelihood",
            "probit",
            "--binarize",
            "4",
            "--likelihood-opt",
            "threshold=0",
            "--biases",
            *FAST,
            "--out",
            str(tmp_path / "out"),
            "--save",
            str(tmp_path / "model.npz"),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert "binarized at >= 4" in out
    assert lines[-1].startswith("test_rmse=")
    m = _metrics(out)
    assert set(m) == {"test_log_loss", "test_auc", "test_accuracy", "test_rmse"}
    assert m["test_log_loss"] > 0 and 0 <= m["test_auc"] <= 1 and 0 <= m["test_accuracy"] <= 1
    fit = bmczoo.load(tmp_path / "model.npz")
    assert fit.info.likelihood.name == "probit" and fit.info.likelihood.threshold == 0.0
    rows = _csv((tmp_path / "out" / "predictions.csv").read_text())
    assert list(rows[0]) == ["user_id", "item_id", "rating", "prediction", "p1"]
    assert {float(r["rating"]) for r in rows} <= {0.0, 1.0}
    p1 = np.array([float(r["p1"]) for r in rows])
    assert np.all((p1 > 0) & (p1 < 1))
    np.testing.assert_allclose(p1, [float(r["prediction"]) for r in rows], atol=1e-6)
    # bmczoo predict adds P(1)
    table = np.loadtxt(tmp_path / "small.data", dtype=np.int64)
    (tmp_path / "pairs.csv").write_text("\n".join(f"{u},{i}" for u, i in table[:4, :2]) + "\n")
    assert (
        main(
            [
                "predict",
                "--model",
                str(tmp_path / "model.npz"),
                "--entries",
                str(tmp_path / "pairs.csv"),
            ]
        )
        == 0
    )
    pred = _csv(capsys.readouterr().out)
    assert list(pred[0]) == ["user_id", "item_id", "mean", "sd", "lo90", "hi90", "p1"]
    assert all(0 < float(r["p1"]) < 1 for r in pred)


def test_ordered_probit_prints_level_log_loss(tmp_path, capsys):
    write_ratings(tmp_path / "small.data")
    rc = main(
        [
            "fit",
            "--data",
            str(tmp_path / "small.data"),
            "--likelihood",
            "ordered-probit",
            "--likelihood-opt",
            "cut_scale=1",
            "-K",
            "2",
            "--num-warmup",
            "10",
            "--num-samples",
            "20",
            "--thinning",
            "1",
            "--quiet",
            "--out",
            str(tmp_path / "out"),
            "--save",
            str(tmp_path / "model.npz"),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("test_rmse=")
    m = _metrics(out)
    assert set(m) == {"test_level_log_loss", "test_rmse"}
    assert 0 < m["test_level_log_loss"] < 5 * np.log(5)
    fit = bmczoo.load(tmp_path / "model.npz")
    assert fit.info.likelihood.cut_scale == 1.0 and fit.info.likelihood.levels == (
        1.0,
        2.0,
        3.0,
        4.0,
        5.0,
    )
    rows = _csv((tmp_path / "out" / "predictions.csv").read_text())
    names = [f"p_{v}" for v in range(1, 6)]
    assert list(rows[0]) == ["user_id", "item_id", "rating", "prediction"] + names
    probs = np.array([[float(r[n]) for n in names] for r in rows])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        probs @ np.arange(1, 6), [float(r["prediction"]) for r in rows], atol=1e-4
    )
    table = np.loadtxt(tmp_path / "small.data", dtype=np.int64)
    (tmp_path / "pairs.csv").write_text("\n".join(f"{u} {i}" for u, i in table[:3, :2]) + "\n")
    assert (
        main(
            [
                "predict",
                "--model",
                str(tmp_path / "model.npz"),
                "--entries",
                str(tmp_path / "pairs.csv"),
            ]
        )
        == 0
    )
    pred = _csv(capsys.readouterr().out)
    assert list(pred[0])[-5:] == names
    np.testing.assert_allclose([sum(float(r[n]) for n in names) for r in pred], 1.0, atol=1e-5)


def test_probit_on_stars_asks_for_binarize(tmp_path, capsys, no_fit):  # noqa: F811 - fixture
    write_ratings(tmp_path / "small.data")
    assert (
        main(["fit", "--data", str(tmp_path / "small.data"), "--likelihood", "probit", *FAST]) == 2
    )
    one_line_error(capsys, "--binarize")
    assert not no_fit


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--likelihood", "ordered-probit", "--likelihood-opt", "cut_scale=-1"], "cut_scale"),
        (["--likelihood", "probit", "--likelihood-opt", "noise_sd=1"], "noise_sd"),
        (["--binarize", "x"], "--binarize"),
    ],
)
def test_bad_latent_options_are_one_line_errors(argv, needle, tmp_path, capsys, no_fit):  # noqa: F811
    write_ratings(tmp_path / "small.data")
    assert main(["fit", "--data", str(tmp_path / "small.data"), *argv, *FAST]) == 2
    one_line_error(capsys, needle)
    assert not no_fit
