"""``bmczoo fit --features`` / ``--implicit``: the Normal-Wishart prior's feature link from
the command line (the data's side tables; for MovieLens files the side files beside the
ratings), a clear one-line error for another prior or a side without a table, and a saved
model that keeps its links."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.cli import main

ML100K_FILES = ("u.data", "u.user", "u.item", "u.genre")

pytestmark = pytest.mark.requires_ml100k(*ML100K_FILES)


@pytest.fixture(scope="module")
def mini(tmp_path_factory, ml100k) -> Path:
    """A small ML-100K folder: the ratings of users 1-60 on movies 1-80, with the official
    u.user, u.item and u.genre (lines for ids without ratings are left out by the loader)."""
    folder = tmp_path_factory.mktemp("ml-mini")
    lines = [
        ln
        for ln in (ml100k / "u.data").read_text().splitlines()
        if int(ln.split("\t")[0]) <= 60 and int(ln.split("\t")[1]) <= 80
    ]
    (folder / "u.data").write_text("\n".join(lines) + "\n")
    for name in ("u.user", "u.item", "u.genre"):
        shutil.copy(ml100k / name, folder / name)
    return folder


def _fit(args, capsys):
    rc = main(
        [
            "fit",
            "-K",
            "2",
            "--method",
            "vb",
            "--max-iter",
            "8",
            "--quiet",
            "--prior",
            "normal-wishart",
        ]
        + args
    )
    out = capsys.readouterr()
    return rc, out.out, out.err


def _prior_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("prior:"))


@pytest.mark.parametrize(
    "option, link_M, link_N",
    [
        (
            ["--features"],
            "{'features': 'data', 'implicit': False}",
            "{'features': 'data', 'implicit': False}",
        ),
        (["--features", "rows"], "{'features': 'data', 'implicit': False}", None),
        (
            ["--features", "cols", "--implicit", "rows"],
            "{'features': None, 'implicit': True}",
            "{'features': 'data', 'implicit': False}",
        ),
        (
            ["--implicit", "both"],
            "{'features': None, 'implicit': True}",
            "{'features': None, 'implicit': True}",
        ),
    ],
)
def test_fit_with_features_and_implicit_feedback(mini, capsys, option, link_M, link_N):
    rc, out, err = _fit(["--data", str(mini / "u.data")] + option, capsys)
    assert rc == 0, err
    line = _prior_line(out)
    assert (f"link_M={link_M}" in line) == (link_M is not None)
    assert (f"link_N={link_N}" in line) == (link_N is not None)
    assert ("link_M" in line) == (link_M is not None) and ("link_N" in line) == (link_N is not None)
    assert out.strip().splitlines()[-1].startswith("test_rmse=")


def test_a_folder_gets_its_side_files(mini, capsys):
    rc, out, err = _fit(["--data", str(mini), "--features", "both"], capsys)
    assert rc == 0, err
    assert "link_M={'features': 'data'" in _prior_line(
        out
    ) and "link_N={'features': 'data'" in _prior_line(out)


def test_the_link_needs_the_normal_wishart_prior(mini, capsys):
    for option in (["--features"], ["--implicit", "rows"]):
        rc = main(["fit", "--data", str(mini), "--prior", "inverse-gamma", "--quiet"] + option)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1
        assert "need --prior normal-wishart" in err and "--prior inverse-gamma" in err
        assert f"--{option[0][2:]}" in err


def test_a_side_without_a_table_is_named(mini, tmp_path, capsys):
    folder = tmp_path / "items-only"
    folder.mkdir()
    for name in ("u.data", "u.item", "u.genre"):
        shutil.copy(mini / name, folder / name)
    rc, _, err = _fit(["--data", str(folder), "--features", "both"], capsys)
    assert rc == 2 and "no feature table for its rows (users)" in err and "--features cols" in err
    rc, out, err = _fit(["--data", str(folder), "--features"], capsys)  # auto: the side it has
    assert rc == 0, err
    assert "link_N={'features': 'data'" in _prior_line(out) and "link_M" not in _prior_line(out)
    sim = main(["fit", "--data", "sim:20", "--prior", "normal-wishart", "--features", "--quiet"])
    assert sim == 2 and "the data has no feature tables" in capsys.readouterr().err


def test_a_plain_ratings_file_without_features_asked_is_read_as_before(mini, capsys):
    rc, out, err = _fit(["--data", str(mini / "u.data")], capsys)
    assert rc == 0, err
    assert "link_" not in _prior_line(out)


def test_binarized_data_keeps_the_features(mini, capsys):
    rc, out, err = _fit(
        ["--data", str(mini), "--features", "rows", "--binarize", "4", "--likelihood", "probit"],
        capsys,
    )
    assert rc == 0, err
    assert "link_M={'features': 'data'" in _prior_line(out)


def test_saved_model_keeps_the_links(mini, tmp_path, capsys):
    path = tmp_path / "model.npz"
    rc, out, err = _fit(
        ["--data", str(mini), "--features", "rows", "--implicit", "cols", "--save", str(path)],
        capsys,
    )
    assert rc == 0, err
    fit = bmc.load(path)
    assert str(fit.info.prior) == _prior_line(out)[len("prior: ") :].split(", K=")[0]
    assert fit.info.prior.links() == {
        "M": {"features": "data", "implicit": False},
        "N": {"features": None, "implicit": True},
    }
    assert np.isfinite(fit.predict(np.arange(3), np.arange(3))).all()
