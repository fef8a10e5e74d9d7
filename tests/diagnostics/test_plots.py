"""Every plot renders headless (Agg) into a valid non-empty PNG with the expected axes;
``report`` writes its files."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from matplotlib.figure import Figure

from bmczoo import diagnostics as dg

from ._fakes import NUM_TRACK, PRIOR, FakeMCMCFit, FakeVBFit, assert_png


def _save(fig, tmp_path, name):
    assert isinstance(fig, Figure)
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    assert_png(path)
    return path


def test_plot_rmse_trace(gibbs_fit, vb_fit, svi_fit, tmp_path):
    fig = dg.plot_rmse_trace(gibbs_fit)
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    # per chain: a draw line and a running-mean line; plus the warm-up marker
    assert len(ax.get_lines()) == 2 * gibbs_fit.rmse_draw.shape[0] + 1
    assert ax.get_xlabel() and ax.get_ylabel() == "test RMSE" and ax.get_legend() is not None
    _save(fig, tmp_path, "rmse_gibbs")
    fig = dg.plot_rmse_trace(vb_fit)
    assert len(fig.axes) == 1 and len(fig.axes[0].get_lines()) == 1
    _save(fig, tmp_path, "rmse_vb")
    with pytest.raises(ValueError, match="Gibbs and VB"):
        dg.plot_rmse_trace(svi_fit)


def test_plot_acf(gibbs_fit, tmp_path):
    fig = dg.plot_acf(gibbs_fit, max_lag=5)
    assert len(fig.axes) == NUM_TRACK
    assert all(ax.get_title().startswith("θ[") for ax in fig.axes)
    _save(fig, tmp_path, "acf")
    fig = dg.plot_acf(
        gibbs_fit,
        entries=[(int(gibbs_fit.track_rows[0]), int(gibbs_fit.track_cols[0]))],
        combined=False,
        max_lag=5,
    )
    assert len(fig.axes) == gibbs_fit.samples["theta"].shape[0]  # one entry, per chain


def test_plot_trace(gibbs_fit, vb_fit, tmp_path):
    fig = dg.plot_trace(gibbs_fit)
    # theta, gamma_sorted, theta_fro, eff_rank: density + trace each (a variable constant
    # over all draws is left out and named in the title)
    post = dg.to_arviz(gibbs_fit).posterior
    varying = [v for v in dg.INVARIANT_VARS if v in post and np.ptp(post[v].values) > 0]
    assert {"theta", "theta_fro", "eff_rank"} <= set(varying)
    assert len(fig.axes) == 2 * len(varying)
    _save(fig, tmp_path, "trace")
    fake = FakeMCMCFit(
        {"gamma": np.ones((2, 10, 3)), "theta": np.random.default_rng(0).normal(size=(2, 10, 2))},
        [0, 1],
        [1, 0],
        (2, 2),
    )
    fig = dg.plot_trace(fake)
    assert len(fig.axes) == 2 and "constant over all draws: sorted γ = 1" in fig.get_suptitle()
    fig = dg.plot_trace(vb_fit, var_names=["theta_fro"])
    assert len(fig.axes) == 2


def test_plot_posterior_compare(gibbs_fit, vb_fit, tmp_path):
    entries = (gibbs_fit.track_rows[:4], gibbs_fit.track_cols[:4])
    fig = dg.plot_posterior_compare(gibbs_fit, vb_fit, entries, vb_draws=200)
    assert len(fig.axes) == 4
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 3  # Gibbs KDE, VB Gaussian, VB q draws
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("Gibbs") and labels[1].startswith("VB (Gaussian")
    _save(fig, tmp_path, "compare")
    assert len(dg.plot_posterior_compare(gibbs_fit, vb_fit).axes) == NUM_TRACK
    with pytest.raises(TypeError):
        dg.plot_posterior_compare(vb_fit, gibbs_fit)


def test_plot_convergence(vb_fit, tmp_path):
    fig = dg.plot_convergence({"small": vb_fit, "same again": vb_fit})
    assert len(fig.axes) == 2
    assert len(fig.axes[1].get_lines()) == 2
    _save(fig, tmp_path, "convergence")
    rng = np.random.default_rng(0)
    eye = np.broadcast_to(np.eye(2), (3, 2, 2)).copy()
    no_test = FakeVBFit(
        rng.normal(size=(3, 2)),
        rng.normal(size=(3, 2)),
        eye,
        eye,
        {"inv_mean": np.ones(2)},
        PRIOR,
        elbo=[-10.0, -5.0, -4.9],
    )
    assert len(dg.plot_convergence([no_test]).axes) == 1


def test_plot_gamma(gibbs_fit, vb_fit, svi_fit, tmp_path):
    for name, fit in [("gibbs", gibbs_fit), ("vb", vb_fit), ("svi", svi_fit)]:
        fig = dg.plot_gamma(fit)
        assert len(fig.axes) == 2
        _save(fig, tmp_path, f"gamma_{name}")
    fig = dg.plot_gamma(gibbs_fit, threshold=0.5)
    bars = [p.get_height() for p in fig.axes[1].patches]
    np.testing.assert_allclose(bars, dg.rank_posterior(gibbs_fit, 0.5))


def test_report(gibbs_fit, vb_fit, tmp_path):
    paths = dg.report(gibbs_fit, tmp_path / "gibbs")
    names = [p.name for p in paths]
    assert names == [
        "summary.csv",
        "summary.md",
        "summary.png",
        "rank_posterior.csv",
        "rmse_trace.png",
        "trace.png",
        "acf.png",
        "gamma.png",
    ]
    for p in paths:
        assert p.is_file() and p.stat().st_size > 0
        if p.suffix == ".png":
            assert_png(p, min_bytes=3000)
    with open(paths[0], newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][1:3] == ["mean", "sd"] and "ess_bulk" in rows[0] and "r_hat" in rows[0]
    assert [r[0] for r in rows[1:]] == list(dg.summary(gibbs_fit).index)
    md = paths[1].read_text()
    assert "| `theta[" in md and "![acf](acf.png)" in md
    # ESS and R-hat of the number of active columns and of the effective rank
    assert (
        "## Rank mixing" in md
        and "| number of active columns |" in md
        and "| effective rank of theta |" in md
    )
    assert "Most frequent number of active columns per chain" in md
    with open(paths[3], newline="") as fh:
        probs = [float(r[1]) for r in list(csv.reader(fh))[1:]]
    assert sum(probs) == pytest.approx(1.0, abs=1e-5)

    vpaths = dg.report(vb_fit, tmp_path / "vb", num_draws=100)
    assert [p.name for p in vpaths][-1] == "convergence.png"
    assert "acf.png" not in {p.name for p in vpaths}


def test_report_of_one_chain_names_its_split_r_hat_and_drift(tmp_path):
    """One chain: the report says R-hat is the split R-hat of its halves, and warns when
    the number of active columns drifts between them (here 1-2 columns, then 3-4)."""
    D, K = 100, 4
    counts = np.r_[np.resize([1, 2], D // 2), np.resize([3, 4], D // 2)]
    gamma = np.where(np.arange(K)[None, None] < counts[None, :, None], PRIOR.C, PRIOR.eps)
    theta = np.random.default_rng(1).normal(size=(1, D, 2))
    fit = FakeMCMCFit({"gamma": gamma, "theta": theta}, [0, 1], [1, 0], (6, 5), prior=PRIOR)
    md = dg.report(fit, tmp_path / "one")[1].read_text()
    assert "R-hat: one chain: R-hat of its two halves" in md
    assert "**Warning: the number of active columns drifts within the chain**" in md
    assert "chains disagree" not in md
    steady = FakeMCMCFit(
        {
            "gamma": np.where(
                np.arange(K)[None, None] < np.resize([1, 2], D)[None, :, None], PRIOR.C, PRIOR.eps
            ),
            "theta": theta,
        },
        [0, 1],
        [1, 0],
        (6, 5),
        prior=PRIOR,
    )
    md = dg.report(steady, tmp_path / "steady")[1].read_text()
    assert "R-hat: one chain" in md and "drifts" not in md
