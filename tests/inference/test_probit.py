"""Gibbs fits with the probit and ordered-probit likelihoods, end to end.

* **Simulation with known truth**: binary entries from a rank-3 probit model (60 x 50,
  half observed).  On the held-out entries the AUC of ``predict_proba`` is far above
  chance (and close to the AUC of the true probabilities ``Phi(theta)``), and
  ``predict_proba`` is calibrated: in 10 bins of the predicted probability the mean
  outcome and the mean prediction differ by less than ``z * sqrt(sum p (1 - p)) / n_b``
  (binomial sd of the bin's mean outcome), ``z`` the Bonferroni threshold over the 10
  bins at familywise level 1%; and the same against the true probabilities.
* **Outputs agree**: ``predict_proba`` at entries requested at fit time (running sums)
  equals the one recomputed from the stored factor (and cut-point) draws (the same draws:
  to float32 rounding); ``predict`` is ``probs @ levels`` (binary: ``P(Y = 1)``),
  ``predictive_interval`` are the levels where the predictive CDF crosses the tails,
  ``log_predictive_density`` is the mean ``log P(Y = y)``; a save / load round trip keeps
  every one of them bit for bit.
* **Checkpoint**: an ordered-probit Gibbs run interrupted after a checkpoint and resumed
  gives the uninterrupted run as :func:`bmczoo.inference.checkpoint.resume_guarantee`
  promises (the latent ``z`` and the cut points are part of the state); ``slow`` (three
  fits, ~35 s).
"""

from __future__ import annotations

import dataclasses
from statistics import NormalDist

import numpy as np
import pytest
from scipy.stats import norm

import bmczoo as bmc
from bmczoo.inference import checkpoint as ck
from bmczoo.inference.gibbs import driver as gibbs_driver
from bmczoo.inference.results.levels import classification_metrics
from bmczoo.likelihoods import OrderedProbit, Probit

ALPHA = 0.01
M1, M2, RANK = 60, 50, 3


def _simulate(seed=0):
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(M1, RANK)), rng.normal(size=(M2, RANK))
    theta = 1.3 * U @ V.T / np.sqrt(RANK) - 0.2
    y = (theta + rng.normal(size=theta.shape) > 0).astype(float)
    obs = rng.random((M1, M2)) < 0.5
    r, c = np.nonzero(obs)
    tr, tc = np.nonzero(~obs)
    train = bmc.RatingData(r, c, y[r, c], (M1, M2))
    test = bmc.RatingData(tr, tc, y[tr, tc], (M1, M2))
    return train, test, norm.cdf(theta[tr, tc])


@pytest.fixture(scope="module")
def probit_fit():
    train, test, p_true = _simulate()
    fit = bmc.fit(
        train,
        K=RANK,
        likelihood=Probit(),
        num_warmup=150,
        num_samples=150,
        thinning=1,
        num_chains=1,
        seed=0,
        progress_bar=False,
        store_factors=True,
        test=test,
    )
    return fit, test, p_true


def _reliability(p, y, bins=10):
    """Per bin of ``p`` (deciles): (mean y - mean p) / (sqrt(sum p(1-p)) / n)."""
    edges = np.quantile(p, np.linspace(0, 1, bins + 1))
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    z = []
    for b in range(bins):
        m = idx == b
        n = m.sum()
        z.append((y[m].mean() - p[m].mean()) / (np.sqrt(np.sum(p[m] * (1 - p[m]))) / n))
    return np.array(z)


def test_auc_and_calibration_with_known_truth(probit_fit):
    fit, test, p_true = probit_fit
    p = fit.predict_proba(test.rows, test.cols)
    m = classification_metrics(test.values, p)
    m_true = classification_metrics(test.values, p_true)
    # far above chance: at least 0.7, and at least half of the oracle's margin over chance
    # (the oracle, Phi(theta), has about 0.86 here; the fit about 0.78)
    assert m["auc"] > 0.7 and m["auc"] - 0.5 > 0.5 * (m_true["auc"] - 0.5), (m, m_true)
    assert m["log_loss"] < np.log(2.0) - 0.1, m
    z_crit = NormalDist().inv_cdf(1 - ALPHA / (2 * 10))
    z_obs = _reliability(p, test.values)
    assert np.max(np.abs(z_obs)) < z_crit, f"reliability z (outcomes) = {np.round(z_obs, 2)}"
    # against the truth: in each bin the mean true probability is the mean prediction
    # within the same binomial-scale error (the outcomes' noise replaced by the truth)
    z_true = _reliability(p, p_true)
    assert np.max(np.abs(z_true)) < z_crit, f"reliability z (truth) = {np.round(z_true, 2)}"


def test_outputs_are_consistent_and_survive_save_load(probit_fit, tmp_path):
    fit, test, _ = probit_fit
    r, c = test.rows, test.cols
    p = fit.predict_proba(r, c)
    assert p.shape == (r.size,) and np.all((p > 0) & (p < 1))
    # requested at fit time (running sums) vs recomputed from the stored draws (same draws)
    from_draws = dataclasses.replace(fit, pred_proba=None).predict_proba(r, c)
    np.testing.assert_allclose(from_draws, p, rtol=1e-4, atol=1e-6)
    # an entry not requested at fit time comes from the draws too
    np.testing.assert_allclose(fit.predict_proba(r[:3], c[:3]), p[:3], rtol=1e-4, atol=1e-6)
    mean, sd = fit.predict(r, c, return_std=True)
    np.testing.assert_allclose(mean, p, rtol=1e-12)
    np.testing.assert_allclose(sd, np.sqrt(p * (1 - p)), rtol=1e-6, atol=1e-9)
    lo, hi = fit.predictive_interval(r, c, prob=0.9)
    np.testing.assert_array_equal(lo, np.where(1 - p >= 0.05, 0.0, 1.0))
    np.testing.assert_array_equal(hi, np.where(1 - p >= 0.95, 0.0, 1.0))
    lpd = fit.log_predictive_density(test)
    np.testing.assert_allclose(
        lpd, np.mean(np.where(test.values == 1, np.log(p), np.log1p(-p))), rtol=1e-6
    )
    path = tmp_path / "probit.npz"
    fit.save(path)
    back = bmc.load(path)
    assert back.info.likelihood == fit.info.likelihood
    np.testing.assert_array_equal(back.predict_proba(r, c), p)
    np.testing.assert_array_equal(back.predict(r, c), fit.predict(r, c))
    np.testing.assert_array_equal(
        back.predictive_interval(r, c)[0], fit.predictive_interval(r, c)[0]
    )
    assert back.log_predictive_density(test) == lpd
    # recomputed from the stored draws: the default save keeps every factor draw
    np.testing.assert_array_equal(
        dataclasses.replace(back, pred_proba=None).predict_proba(r, c), from_draws
    )


# --------------------------------------------------------------------------- ordered probit
def _ordinal(seed=3, m1=20, m2=15):
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(m1, 2)), rng.normal(size=(m2, 2))
    z = U @ V.T + rng.normal(size=(m1, m2))
    y = 1.0 + np.digitize(z, [-1.0, 0.0, 1.0])  # levels 1..4
    obs = rng.random((m1, m2)) < 0.6
    r, c = np.nonzero(obs)
    tr, tc = np.nonzero(~obs)
    return bmc.RatingData(r, c, y[r, c], (m1, m2)), bmc.RatingData(tr, tc, y[tr, tc], (m1, m2))


def test_ordered_probit_outputs_and_save_load(tmp_path):
    train, test = _ordinal()
    fit = bmc.fit(
        train,
        K=2,
        likelihood=OrderedProbit(),
        num_warmup=40,
        num_samples=30,
        thinning=1,
        num_chains=2,
        seed=1,
        progress_bar=False,
        store_factors=True,
        test=test,
    )
    levels = np.asarray(fit.info.likelihood.levels)
    assert tuple(levels) == (1.0, 2.0, 3.0, 4.0)
    cuts = np.asarray(fit.samples["cuts"])
    assert cuts.shape == (2, 30, 3) and np.all(np.diff(cuts, axis=-1) > 0)
    r, c = test.rows, test.cols
    P = fit.predict_proba(r, c)
    assert P.shape == (r.size, 4)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(
        dataclasses.replace(fit, pred_proba=None).predict_proba(r, c), P, rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(fit.predict(r, c), P @ levels, rtol=1e-12)
    lo, hi = fit.predictive_interval(r, c, prob=0.5)
    F = np.cumsum(P, axis=1)
    np.testing.assert_array_equal(lo, levels[np.argmax(F >= 0.25 - 1e-12, axis=1)])
    np.testing.assert_array_equal(hi, levels[np.argmax(F >= 0.75 - 1e-12, axis=1)])
    assert np.all(lo <= hi)
    idx = fit.info.likelihood.level_index(test.values)
    np.testing.assert_allclose(
        fit.log_predictive_density(test), np.mean(np.log(P[np.arange(r.size), idx])), rtol=1e-10
    )
    # the RMSE trace is of the expected level (data scale)
    assert np.isfinite(fit.rmse_mean[:, -1]).all() and fit.rmse_mean[:, -1].max() < 1.5
    fit.save(tmp_path / "op.npz")
    back = bmc.load(tmp_path / "op.npz")
    np.testing.assert_array_equal(back.predict_proba(r, c), P)
    np.testing.assert_array_equal(back.samples["cuts"], fit.samples["cuts"])
    np.testing.assert_array_equal(
        dataclasses.replace(back, pred_proba=None).predict_proba(r[:5], c[:5]),
        dataclasses.replace(fit, pred_proba=None).predict_proba(r[:5], c[:5]),
    )


@pytest.mark.slow
def test_ordered_probit_checkpoint_resumes_exactly(tmp_path, monkeypatch):
    """Interrupted (KeyboardInterrupt right after the second checkpoint is written) and
    resumed: the draws, the cut points and the level probabilities are the uninterrupted
    run's."""
    train, test = _ordinal(m1=12, m2=10)
    kw = dict(
        K=2,
        likelihood=OrderedProbit(),
        num_warmup=10,
        num_samples=24,
        thinning=2,
        num_chains=2,
        seed=5,
        progress_bar=False,
        store_factors=True,
        test=test,
    )
    full = bmc.fit(train, **kw)
    path = tmp_path / "run.npz"
    real_save, calls = gibbs_driver._save, []

    def interrupting_save(*args, **kwargs):
        real_save(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(gibbs_driver, "_save", interrupting_save)
    with pytest.raises(KeyboardInterrupt, match="resume"):
        bmc.fit(train, checkpoint=path, checkpoint_every=6, **kw)
    monkeypatch.setattr(gibbs_driver, "_save", real_save)
    _, arrays = ck.load_npz(path)
    assert 0 < int(arrays["state/iteration"]) < 34
    assert "state/lik/z" in arrays and "state/lik/cuts" in arrays
    resumed = bmc.fit(train, checkpoint=path, checkpoint_every=6, **kw)
    g = ck.resume_guarantee()
    assert full.samples.keys() == resumed.samples.keys() and "cuts" in full.samples
    for k in full.samples:
        g.check(np.asarray(full.samples[k]), np.asarray(resumed.samples[k]), err_msg=k)
    for f in ("pred_proba", "pred_mean", "rmse_draw", "rmse_mean"):
        g.check(np.asarray(getattr(full, f)), np.asarray(getattr(resumed, f)), err_msg=f)
