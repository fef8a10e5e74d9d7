"""``bmczoo fit --bias-features``: biases whose prior means are linear in the features of
``--features`` / ``--implicit`` (``bmczoo.offsets.Biases(row_features=..., ...)``), and a
one-line error without features."""

from __future__ import annotations

import pytest

from bmczoo.cli import main

from test_cli_features import ML100K_FILES, mini  # noqa: F401 - the data fixture of that module

pytestmark = pytest.mark.requires_ml100k(*ML100K_FILES)


def test_fit_with_feature_driven_biases(mini, capsys):  # noqa: F811
    # VB, as test_cli_features: the priors' registry, read by the command line, holds the
    # test modules' subclasses of NormalWishart (a wrong Gibbs block) once they are imported
    rc = main(
        [
            "fit",
            "--data",
            str(mini),
            "-K",
            "2",
            "--method",
            "vb",
            "--max-iter",
            "8",
            "--quiet",
            "--prior",
            "normal-wishart",
            "--features",
            "rows",
            "--implicit",
            "cols",
            "--bias-features",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    prior_line = next(ln for ln in out.out.splitlines() if ln.startswith("prior:"))
    assert "feature-driven biases" in prior_line
    assert out.out.strip().splitlines()[-1].startswith("test_rmse=")


def test_bias_features_need_features(mini, capsys):  # noqa: F811
    rc = main(["fit", "--data", str(mini), "--prior", "normal-wishart", "--bias-features"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--bias-features needs --features and/or --implicit" in err
