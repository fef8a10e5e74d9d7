"""``bmczoo fit --time-bins B``: a ratings file with a timestamp column read as the user x
item x time-bin array (the timestamps cut into ``B`` equal-count bins, as
``TensorData.from_ratings``), fitted by the CP tensor model; its saved model, ``--out``,
``bmczoo predict`` at new timestamps, and the errors (before any fit)."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo
from bmczoo.cli import main
from bmczoo.data import TensorData

from test_cli_errors import no_fit, one_line_error, write_ratings  # noqa: F401 - fixture

GIBBS = ["-K", "2", "--num-warmup", "5", "--num-samples", "10", "--thinning", "1", "--quiet"]


def test_fit_with_time_bins(tmp_path, capsys):
    write_ratings(tmp_path / "r.data", n=300)
    save, out_dir = tmp_path / "m.npz", tmp_path / "out"
    args = ["fit", "--data", str(tmp_path / "r.data"), "--time-bins", "3", *GIBBS]
    rc = main(args + ["--save", str(save), "--out", str(out_dir)])
    out = capsys.readouterr().out
    assert rc == 0, out
    fit = bmczoo.load(save)
    assert type(fit).__name__ == "TensorFit" and fit.shape == (30, 20, 3)
    # the library's array of the same file, split at the same positions
    ratings = bmczoo.datasets.read_ratings(tmp_path / "r.data")
    train, test = TensorData.from_ratings(ratings, time_bins=3).split(0.2, seed=0)
    np.testing.assert_array_equal(fit.seen_index, train.indices)
    rmse = float(out.strip().splitlines()[-1].split("=")[1])
    assert rmse == pytest.approx(fit.rmse(test), abs=1e-4)
    rows = (out_dir / "predictions.csv").read_text().splitlines()
    assert rows[0] == "user_id,item_id,time_bin,rating,prediction" and len(rows) == test.n + 1
    assert (out_dir / "posterior.nc").is_file()
    # bmczoo predict bins each entry's timestamp by the fit's bins
    entries = tmp_path / "e.csv"
    t0 = 881250949
    entries.write_text(f"user,item,time\n1000,50,{t0}\n1000,50,{t0 + 10**6}\n1007,53,{t0 + 1010}\n")
    rc = main(["predict", "--model", str(save), "--entries", str(entries)])
    got, err = capsys.readouterr()
    assert rc == 0, err
    got = np.loadtxt(got.splitlines()[1:], delimiter=",")
    r = np.searchsorted(np.unique(1000 + 7 * (np.arange(30))), [1000, 1000, 1007])
    c = np.searchsorted(50 + 3 * np.arange(20), [50, 50, 53])
    # equal-count bins: cut at the timestamps' tertiles (a time outside them: the end bins)
    edges = np.quantile(ratings.timestamps, [1 / 3, 2 / 3])
    b = np.searchsorted(edges, [t0, t0 + 10**6, t0 + 1010], side="right")
    assert list(b[:2]) == [0, 2]
    bins, _ = bmczoo.data.time_bins(ratings.timestamps, 3)
    np.testing.assert_array_equal(np.searchsorted(edges, ratings.timestamps, side="right"), bins)
    mean, sd = fit.predict(r, c, b, return_std=True)
    np.testing.assert_allclose(got[:, 2], mean, rtol=1e-5)
    np.testing.assert_allclose(got[:, 3], sd, rtol=1e-5)
    entries.write_text("1000 50\n")
    rc = main(["predict", "--model", str(save), "--entries", str(entries)])
    err = capsys.readouterr().err
    assert rc == 2 and "fitted with --time-bins, so each entry needs its time" in err


def test_svi_with_time_bins(tmp_path, capsys):
    write_ratings(tmp_path / "r.data", n=300)
    args = ["fit", "--data", str(tmp_path / "r.data"), "--time-bins", "2", "--method", "svi"]
    rc = main(args + ["-K", "2", "--num-steps", "30", "--quiet", "--save", str(tmp_path / "m.npz")])
    out = capsys.readouterr().out
    assert rc == 0, out
    fit = bmczoo.load(tmp_path / "m.npz")
    assert fit.info.method == "svi" and fit.shape == (30, 20, 2)
    assert np.isfinite(float(out.strip().splitlines()[-1].split("=")[1]))


@pytest.mark.parametrize(
    "args, timestamp, needles",
    [
        (["--time-bins", "0"], True, ("--time-bins must be at least 1",)),
        (["--time-bins", "3"], False, ("--time-bins needs the ratings' timestamps", "4th column")),
        (["--time-bins", "3", "--context"], True, ("--time-bins", "--context", "choose one")),
        (["--time-bins", "3", "--split", "per-user"], True, ("--split per-user", "tensor")),
        (["--time-bins", "3", "--top-n", "5"], True, ("--top-n", "tensor fit")),
    ],
)
def test_time_bins_errors(tmp_path, capsys, no_fit, args, timestamp, needles):  # noqa: F811
    write_ratings(tmp_path / "r.data", timestamp=timestamp)
    assert main(["fit", "--data", str(tmp_path / "r.data"), *args, "-K", "2", "--quiet"]) == 2
    one_line_error(capsys, *needles)
    assert no_fit == []


def test_time_bins_on_the_simulator_is_an_error(capsys, no_fit):  # noqa: F811
    assert main(["fit", "--data", "sim:20", "--time-bins", "3", "-K", "2", "--quiet"]) == 2
    one_line_error(capsys, "the simulator has none")
