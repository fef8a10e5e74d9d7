"""The report of a fit states its likelihood truthfully and uses one scale: a learned
noise is listed as learned (no fixed ``tau``/``lam``) and its sd ``1/sqrt(tau)`` is a row
of the summary table; ``trace.png`` draws theta on the data's scale, like the table."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import diagnostics as dg


@pytest.fixture(scope="module")
def shifted():
    """The paper's simulation moved to a rating-like scale (mean about 3), so that the
    centring offset is far from 0."""
    sim = bmc.datasets.simulate_paper(30, rank=2, frac=0.5, noise_sd=0.5, seed=5)
    t = sim.train
    return bmc.RatingData(t.rows, t.cols, np.asarray(t.values) + 3.0, t.shape).split(0.2, seed=0)


@pytest.fixture(scope="module")
def learned_fit(shifted):
    train, test = shifted
    return bmc.fit(
        train,
        K=2,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=10,
        num_samples=40,
        thinning=1,
        num_chains=2,
        test=test,
        progress_bar=False,
    )


def test_learned_noise_in_table_and_settings(learned_fit, tmp_path):
    fit = learned_fit
    dg.report(fit, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "- **likelihood**: LearnedNoise(" in md and "learned" in md
    assert "- **tau**" not in md and "- **lam**" not in md
    table = dg.summary(fit, round_to="none")
    assert "noise_sd" in table.index
    sd = 1.0 / np.sqrt(np.asarray(fit.samples["tau"], np.float64))
    assert table.loc["noise_sd", "mean"] == pytest.approx(sd.mean(), rel=1e-12)
    assert "`noise_sd`" in md


def test_tempered_fit_lists_its_fixed_noise(shifted, tmp_path):
    train, _ = shifted
    fit = bmc.fit(
        train,
        K=2,
        method="vb",
        max_iter=5,
        likelihood=bmc.likelihoods.Tempered(noise_sd=0.5),
        progress_bar=False,
    )
    dg.report(fit, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "- **likelihood**: Tempered(" in md
    assert f"- **tau**: {1 / 0.25:.4g}" in md and "- **noise sd**: 0.5" in md
    assert "noise_sd" not in dg.summary(fit).index


def test_vb_learned_noise_sd_draws_from_q(shifted):
    train, _ = shifted
    fit = bmc.fit(
        train,
        K=2,
        method="vb",
        max_iter=20,
        likelihood=bmc.likelihoods.LearnedNoise(),
        progress_bar=False,
    )
    post = dg.to_arviz(fit, num_draws=4000, seed=1).posterior
    q = fit.q_noise
    # E[tau^(-1/2)] under Gamma(shape, rate) = sqrt(rate) Gamma(shape - 1/2) / Gamma(shape)
    from scipy.special import gammaln

    a, b = float(q["shape"]), float(q["rate"])
    exact = np.sqrt(b) * np.exp(gammaln(a - 0.5) - gammaln(a))
    x = post["noise_sd"].values.ravel()
    assert abs(x.mean() - exact) < 5 * x.std() / np.sqrt(x.size)


def test_trace_plot_draws_theta_on_the_data_scale(learned_fit):
    fit = learned_fit
    fig = dg.plot_trace(fit)
    theta = np.asarray(fit.samples["theta"], np.float64) + fit.info.shift.offset
    trace_axes = [ax for ax in fig.axes if ax.get_title().startswith("θ")]
    assert len(trace_axes) == 2  # density and trace
    ys = np.concatenate(
        [np.asarray(line.get_ydata(), np.float64) for line in trace_axes[1].get_lines()]
    )
    ys = ys[np.isfinite(ys)]
    assert ys.size >= theta.size
    # every drawn value is a draw of theta on the data scale
    assert ys.min() == pytest.approx(theta.min(), rel=1e-6) and ys.max() == pytest.approx(
        theta.max(), rel=1e-6
    )
    assert fit.info.shift.offset > 2.0
