"""``bmczoo fit --context``: time effects from a ratings file's timestamp column (the
context offset sampled by Gibbs or fitted by VB), its outputs and saved model, and its errors (before any
fit)."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import main

from test_cli_errors import no_fit, one_line_error, write_ratings  # noqa: F401 - fixture

GIBBS = ["-K", "2", "--num-warmup", "5", "--num-samples", "10", "--thinning", "1", "--quiet"]


def test_fit_with_time_context(tmp_path, capsys):
    write_ratings(tmp_path / "r.data", n=300)
    rc = main(
        [
            "fit",
            "--data",
            str(tmp_path / "r.data"),
            "--context",
            "time_bin,user_dev",
            "--likelihood",
            "learned",
            "--biases",
            *GIBBS,
            "--save",
            str(tmp_path / "m.npz"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "context: time_bin,user_dev" in out
    rmse = float(out.strip().splitlines()[-1].split("=")[1])
    assert np.isfinite(rmse)
    fit = bmczoo.load(tmp_path / "m.npz")
    (off,) = fit.info.offsets
    assert off == bmczoo.offsets.Context(columns=off.columns) and off.columns is not None
    assert "context_lam" in fit.samples and fit.samples["context_lam"].shape[-1] == 2
    rows = (tmp_path / "out" / "predictions.csv").read_text().splitlines()
    assert rows[0].startswith("user_id,item_id,rating,prediction") and len(rows) == 61
    # bmczoo predict reads each entry's time and encodes it as the fit's features were
    entries = tmp_path / "e.csv"
    later = 881250949 + 1000 + 40 * 86_400
    entries.write_text(f"user,item,time\n1000,50,{later}\n1000,50,881251949\n1007,53,{later}\n")
    rc = main(["predict", "--model", str(tmp_path / "m.npz"), "--entries", str(entries)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    got = np.loadtxt(out.splitlines()[1:], delimiter=",")
    from bmczoo.cli.saved import _load_model

    model = _load_model(str(tmp_path / "m.npz"))
    assert model.time.groups == ("time_bin", "user_dev")
    r, c = (
        np.searchsorted(model.user_ids, [1000, 1000, 1007]),
        np.searchsorted(model.item_ids, [50, 50, 53]),
    )
    t = np.array([later, 881251949, later])
    ctx = model.time.encode(r, c, t)
    np.testing.assert_allclose(got[:, 2], fit.predict(r, c, context=ctx), rtol=1e-5)
    assert got[0, 2] != got[1, 2]  # the same pair at two times: the drift differs
    entries.write_text("1000 50\n")
    rc = main(["predict", "--model", str(tmp_path / "m.npz"), "--entries", str(entries)])
    err = capsys.readouterr().err
    assert rc == 2 and "fitted with --context, so each entry needs its time" in err


def test_vb_fit_with_time_context(tmp_path, capsys):
    """``--method vb --context``: the saved model's predictions at new times are the
    library's from the fit's q."""
    write_ratings(tmp_path / "r.data", n=300)
    args = ["fit", "--data", str(tmp_path / "r.data"), "--context", "--method", "vb"]
    rc = main(args + ["-K", "2", "--quiet", "--save", str(tmp_path / "m.npz")])
    out = capsys.readouterr().out
    assert rc == 0, out
    fit = bmczoo.load(tmp_path / "m.npz")
    assert fit.q_offsets["context/w_mean"].ndim == 1
    entries = tmp_path / "e.csv"
    later = 881250949 + 1000 + 40 * 86_400
    entries.write_text(f"user,item,time\n1000,50,{later}\n1007,53,881251949\n")
    rc = main(["predict", "--model", str(tmp_path / "m.npz"), "--entries", str(entries)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    got = np.loadtxt(out.splitlines()[1:], delimiter=",")
    from bmczoo.cli.saved import _load_model

    model = _load_model(str(tmp_path / "m.npz"))
    r = np.searchsorted(model.user_ids, [1000, 1007])
    c = np.searchsorted(model.item_ids, [50, 53])
    ctx = model.time.encode(r, c, np.array([later, 881251949]))
    np.testing.assert_allclose(got[:, 2], fit.predict(r, c, context=ctx), rtol=1e-5)


@pytest.mark.parametrize(
    "args, timestamp, needles",
    [
        (["--context"], False, ("--context needs the ratings' timestamps", "4th column")),
        (["--context", "hour"], True, ("--context hour", "time_bin, item_time_bin")),
        (["--context", "--method", "svi"], True, ("--method gibbs, vb and nuts only, not svi",)),
    ],
)
def test_context_errors(tmp_path, capsys, no_fit, args, timestamp, needles):  # noqa: F811
    write_ratings(tmp_path / "r.data", timestamp=timestamp)
    assert main(["fit", "--data", str(tmp_path / "r.data"), *args, "-K", "2", "--quiet"]) == 2
    one_line_error(capsys, *needles)
    assert no_fit == []


def test_context_on_the_simulator_is_an_error(capsys, no_fit):  # noqa: F811
    assert main(["fit", "--data", "sim:20", "--context", "-K", "2", "--quiet"]) == 2
    one_line_error(capsys, "the simulator has none")
