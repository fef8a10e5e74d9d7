"""Rank posterior, tail probabilities of gamma and the default threshold, through the
prior's methods only (``q_sample``, ``q_prob_above``, ``prob_above``, ``active_threshold``).

* the vectorised Poisson-binomial law equals brute-force enumeration, and with 0/1
  probabilities (gamma drawn) the rank posterior is *exactly* the frequency of each count;
* NUTS on the discrete model integrates gamma out (``gamma_slab_prob``): the rank
  posterior averages the exact two-point laws of the draws;
* nothing depends on a prior's name: an unnamed subclass of a zoo prior gives the same
  diagnostics as the prior itself.
"""

from __future__ import annotations

import dataclasses

import itertools
import math

import arviz as az
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import diagnostics as dg
from bmczoo.inference.results.rank import poisson_binomial as _poisson_binomial

from ._fakes import PRIOR, FakeMCMCFit, FakeVBFit, random_spd


def _brute_force(p):
    """Law of the number of successes of independent Bernoulli(p_h), by enumeration."""
    K = len(p)
    out = np.zeros(K + 1)
    for z in itertools.product([0, 1], repeat=K):
        z = np.array(z)
        out[z.sum()] += np.prod(np.where(z == 1, p, 1 - p))
    return out


def test_poisson_binomial_vectorised_matches_enumeration():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(3, 2, 4))
    p[0, 0, 1] = 0.0
    p[1, 1] = [1.0, 0.0, 1.0, 0.5]
    law = _poisson_binomial(p)
    assert law.shape == (3, 2, 5)
    for idx in np.ndindex(3, 2):
        np.testing.assert_allclose(law[idx], _brute_force(p[idx]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(law.sum(-1), 1.0, rtol=1e-12)
    # 0/1 probabilities: exactly one-hot at the number of ones
    z = (rng.uniform(size=(50, 6)) < 0.4).astype(float)
    np.testing.assert_array_equal(_poisson_binomial(z), np.eye(7)[z.sum(-1).astype(int)])


@pytest.mark.filterwarnings(
    "ignore::bmczoo.diagnostics.RankMixingWarning"
)  # iid fakes: R-hat varies by chance
@pytest.mark.parametrize(
    "prior",
    [None, bmc.priors.InverseGamma(1.0, 0.1), bmc.priors.Discrete(1.0, 0.3, 0.05)],
    ids=["no-prior", "inverse-gamma", "discrete"],
)
def test_drawn_gamma_gives_exactly_the_frequencies(prior):
    """Draws of gamma itself: prob_above is an indicator, and the average of the one-hot
    laws is exactly the frequency count of the draws (bit for bit)."""
    rng = np.random.default_rng(1)
    gamma = (
        rng.choice([0.05, 0.3, 1.0], size=(3, 37, 4))
        if prior is not None
        else rng.exponential(size=(3, 37, 4))
    )
    fit = FakeMCMCFit(
        {"gamma": gamma, "theta": np.zeros((3, 37, 1))}, [0], [0], (2, 2), prior=prior
    )
    for t in (0.0, 0.1, 0.2, 0.5, 2.0):
        counts = np.sum(gamma > t, axis=-1).ravel()
        np.testing.assert_array_equal(
            dg.rank_posterior(fit, t), np.bincount(counts, minlength=5) / counts.size
        )
        np.testing.assert_allclose(
            dg.prob_gamma_above(fit, t), np.mean(gamma > t, axis=(0, 1)), rtol=1e-12
        )


def test_nuts_discrete_integrated_gamma():
    """Draws with ``gamma_slab_prob`` (NUTS/SVI on the discrete model, gamma integrated out):
    the rank posterior averages the Poisson-binomial laws of the per-draw P(gamma_h = C)."""
    prior = bmc.priors.Discrete(C=1.0, p=0.2, eps=0.04)
    rng = np.random.default_rng(2)
    q = rng.uniform(size=(2, 15, 3)) ** 2
    q[0, 0] = [0.0, 1.0, 1.0]
    gamma = q * prior.C + (1 - q) * prior.eps  # the model's Rao-Blackwellised E[gamma | M, N]
    fit = FakeMCMCFit(
        {"gamma": gamma, "gamma_slab_prob": q, "theta": np.zeros((2, 15, 1))},
        [0],
        [0],
        (2, 2),
        method="nuts",
        prior=prior,
    )
    t = 0.5
    want = np.mean([_brute_force(qq) for qq in q.reshape(-1, 3)], axis=0)
    np.testing.assert_allclose(dg.rank_posterior(fit, t), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dg.prob_gamma_above(fit, t), q.mean(axis=(0, 1)), rtol=1e-12)
    # thresholds below the spike or above the slab: certain counts
    np.testing.assert_array_equal(dg.rank_posterior(fit, 0.01), [0, 0, 0, 1])
    np.testing.assert_array_equal(dg.rank_posterior(fit, 1.0), [1, 0, 0, 0])
    assert dg.gamma_threshold(fit) == pytest.approx(math.sqrt(prior.C * prior.eps))


@pytest.mark.slow  # a NUTS compilation (~8 s); the rank diagnostics of Gibbs fits stay in the default suite
def test_nuts_discrete_fit(tiny_ratings):
    """A real NUTS fit of the discrete prior: ``gamma_slab_prob`` in the samples, the rank
    posterior from it, and the conversion/report run."""
    prior = bmc.priors.Discrete(C=1.0, p=0.5, eps=0.05)
    # one chain: ten NUTS steps are too few for chains to agree on the count (that would
    # raise RankMixingWarning, which rank_posterior's other tests check)
    fit = bmc.fit(
        tiny_ratings,
        K=2,
        prior=prior,
        method="nuts",
        num_warmup=10,
        num_samples=10,
        thinning=1,
        num_chains=1,
        progress_bar=False,
        seed=0,
    )
    assert "gamma_slab_prob" in fit.samples
    t = dg.gamma_threshold(fit)
    q = np.asarray(fit.samples["gamma_slab_prob"], np.float64).reshape(-1, 2)
    want = np.mean([_brute_force(qq) for qq in q], axis=0)
    np.testing.assert_allclose(dg.rank_posterior(fit, t), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fit.rank_posterior(t), want, rtol=1e-9, atol=1e-12)
    assert "gamma" in dg.to_arviz(fit).posterior


def _fake_vb(prior, q_gamma, K=3):
    rng = np.random.default_rng(4)
    return FakeVBFit(
        rng.normal(size=(5, K)),
        rng.normal(size=(4, K)),
        random_spd(rng, 5, K),
        random_spd(rng, 4, K),
        q_gamma,
        prior,
        elbo=[-3.0, -2.0],
    )


def test_vb_uses_the_priors_q_methods():
    prior = bmc.priors.Discrete(C=1.0, p=0.1, eps=0.05)
    q = {"inv_mean": np.ones(3), "slab_prob": np.array([0.9, 0.3, 0.02])}
    fit = _fake_vb(prior, q)
    for t in (0.01, 0.2, 1.5):
        p = prior.q_prob_above(q, t)
        np.testing.assert_allclose(dg.prob_gamma_above(fit, t), p, rtol=1e-12)
        np.testing.assert_allclose(
            dg.rank_posterior(fit, t), _brute_force(p), rtol=1e-12, atol=1e-15
        )
    # the draws of q(gamma) are the prior's q_sample with the same generator
    g = dg.to_arviz(fit, num_draws=64, seed=3).posterior["gamma"].values[0]
    np.testing.assert_array_equal(g, prior.q_sample(q, 64, np.random.default_rng(3)))
    assert dg.gamma_threshold(fit) == pytest.approx(math.sqrt(0.05))
    # no threshold of its own: 1% of the largest E[gamma] proxy 1/E[1/gamma]
    ig = _fake_vb(
        bmc.priors.InverseGamma(1.0, 0.1),
        {"inv_mean": np.array([0.5, 2.0, 10.0]), "shape": np.full(3, 6.0), "scale": np.ones(3)},
    )
    assert dg.gamma_threshold(ig) == pytest.approx(0.02)


@pytest.mark.filterwarnings(
    "ignore::bmczoo.diagnostics.RankMixingWarning"
)  # iid fakes: R-hat varies by chance
def test_no_branching_on_the_prior_name():
    base = bmc.priors.Discrete(C=1.0, p=0.2, eps=0.04)
    # the same prior under another name (an instance attribute: no class is added to the
    # registry, which finds subclasses of Prior)
    other = bmc.priors.Discrete(C=1.0, p=0.2, eps=0.04)
    object.__setattr__(other, "name", "some-other-prior")
    assert other.name != base.name
    rng = np.random.default_rng(5)
    q = rng.uniform(size=(2, 9, 3))
    samples = {"gamma": q + (1 - q) * 0.04, "gamma_slab_prob": q, "theta": np.zeros((2, 9, 1))}
    fits = [FakeMCMCFit(dict(samples), [0], [0], (2, 2), prior=p) for p in (base, other)]
    np.testing.assert_array_equal(dg.rank_posterior(fits[0], 0.3), dg.rank_posterior(fits[1], 0.3))
    assert dg.gamma_threshold(fits[0]) == dg.gamma_threshold(fits[1])
    qg = {"inv_mean": np.ones(3), "slab_prob": np.array([0.7, 0.2, 0.5])}
    vbs = [_fake_vb(p, qg) for p in (base, other)]
    np.testing.assert_array_equal(dg.rank_posterior(vbs[0], 0.3), dg.rank_posterior(vbs[1], 0.3))
    np.testing.assert_array_equal(
        dg.to_arviz(vbs[0], num_draws=20).posterior["gamma"].values,
        dg.to_arviz(vbs[1], num_draws=20).posterior["gamma"].values,
    )


def test_vb_without_prior():
    fit = _fake_vb(bmc.priors.Fixed(1.0), {"inv_mean": np.ones(3)})
    fit.info = dataclasses.replace(fit.info, prior=None)
    assert "gamma" not in dg.to_arviz(fit, num_draws=10).posterior
    with pytest.raises(ValueError, match="no prior"):
        dg.rank_posterior(fit, 0.5)


def test_bad_thresholds():
    fit = _fake_vb(bmc.priors.Fixed(1.0), {"inv_mean": np.ones(3)})
    for bad, error in (
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (True, TypeError),
        ("0.1", TypeError),
    ):
        with pytest.raises(error, match="threshold"):
            dg.rank_posterior(fit, bad)
        with pytest.raises(error, match="threshold"):
            dg.prob_gamma_above(fit, bad)
    with pytest.raises(TypeError, match="threshold"):
        dg.prob_gamma_above(fit, None)
    # no threshold: the prior's (gamma_threshold)
    np.testing.assert_array_equal(
        dg.rank_posterior(fit), dg.rank_posterior(fit, dg.gamma_threshold(fit))
    )


def _stuck_fit(levels_per_chain, num_draws=50, K=4):
    """A fake Gibbs fit of the discrete prior whose chain c has ``levels_per_chain[c]``
    active columns in every draw, or (a list) alternates between the given counts."""
    C = len(levels_per_chain)
    gamma = np.full((C, num_draws, K), PRIOR.eps)
    for c, lev in enumerate(levels_per_chain):
        counts = np.resize(np.atleast_1d(lev), num_draws)
        for d, k in enumerate(counts):
            gamma[c, d, :k] = PRIOR.C
    return FakeMCMCFit({"gamma": gamma}, [], [], (6, 5), prior=PRIOR)


def test_rank_posterior_warns_when_chains_disagree():
    thr = dg.gamma_threshold(_stuck_fit([2, 2]))
    # each chain stuck at its own count: R-hat undefined, the counts differ
    with pytest.warns(dg.RankMixingWarning, match="disagree"):
        dg.rank_posterior(_stuck_fit([2, 3]), thr)
    # chains moving over different ranges: R-hat > 1.05
    with pytest.warns(dg.RankMixingWarning, match="R-hat"):
        dg.rank_posterior(_stuck_fit([[1, 2], [3, 4]]), thr)
    mix = dg.rank_mixing(_stuck_fit([[1, 2], [3, 4]]))
    assert mix["disagree"] and mix["r_hat"] > 1.05 and mix["chain_modes"] == [1, 3]
    assert mix["chain_means"] == [1.5, 3.5]


def test_rank_posterior_quiet_when_chains_agree():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = dg.rank_posterior(
            _stuck_fit([[1, 2], [2, 1], [1, 2]]), dg.gamma_threshold(_stuck_fit([2]))
        )
        np.testing.assert_allclose(p[1:3], [0.5, 0.5])
        dg.rank_posterior(_stuck_fit([3, 3]), 0.2)  # identical constant chains: no disagreement
    mix = dg.rank_mixing(_stuck_fit([[1, 2], [2, 1]]))
    assert not mix["disagree"] and mix["r_hat"] < 1.05 and np.isfinite(mix["ess_bulk"])
    assert dg.rank_mixing(_stuck_fit([3]))["num_chains"] == 1


def test_one_chain_gets_the_split_r_hat_of_its_halves():
    """One chain (``bmc.fit``'s default): R-hat is ArviZ's on the chain's two halves, so
    drift within the chain is seen; a chain holding one count throughout has none."""
    # the count moves between 1 and 2 in the first half and between 3 and 4 in the second
    drift = _stuck_fit([[1, 2] * 25 + [3, 4] * 25], num_draws=100)
    mix = dg.rank_mixing(drift)
    x = np.resize([1, 2], 50).tolist() + np.resize([3, 4], 50).tolist()
    assert mix["r_hat_kind"] == "split one chain" and not mix["disagree"] and mix["drifts"]
    assert mix["r_hat"] == pytest.approx(
        float(az.rhat(np.asarray(x, float).reshape(2, 50))), rel=1e-12
    )
    # each half constant at its own count: no within-half variance, R-hat infinite
    halves = dg.rank_mixing(_stuck_fit([[2] * 25 + [3] * 25], num_draws=50))
    assert halves["r_hat"] == float("inf") and halves["drifts"]
    # a chain moving over the same range in both halves does not drift
    steady = dg.rank_mixing(_stuck_fit([[1, 2]], num_draws=101))  # odd: the last draw left out
    assert steady["r_hat"] < 1.05 and not steady["drifts"]
    # too short to halve, and constant: undefined, not drift
    for fit in (_stuck_fit([[1, 2]], num_draws=7), _stuck_fit([3])):
        mix = dg.rank_mixing(fit)
        assert np.isnan(mix["r_hat"]) and not mix["drifts"]
    # rank_posterior warns only when several chains disagree (drift is reported, not warned)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dg.rank_posterior(drift, dg.gamma_threshold(drift))
