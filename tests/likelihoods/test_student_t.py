"""The Student-t likelihood: its checks, its discovery, its outputs, and its posterior.

Exact posterior: with ``Fixed(gamma=1e-6)`` the factor term is ~1e-6, negligible, so on
pure noise the posterior of ``tau`` is one-dimensional,
``p(tau | y) ∝ Gamma(tau | a, b) prod_k t_nu(y_k | 0, tau^(-1/2))``, whose mean and sd are
computed by quadrature.  The Gibbs sampler (weights and ``tau`` blocks) and NUTS (``w``
integrated out) must both agree with them within ``z_crit`` ArviZ MCSEs.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import integrate, special, stats

import bmczoo as bmc
from tests.inference.test_nuts_components import M1, M2, _agreement, _positions

LIK = bmc.likelihoods.StudentT(nu=4.0, a=2.0, b=1.0)


def test_discovered_and_named():
    assert bmc.likelihoods.registry()["student-t"] is bmc.likelihoods.StudentT
    lik = bmc.likelihoods.get_likelihood("student_t", nu=3.0)
    assert lik == bmc.likelihoods.StudentT(nu=3.0) and lik.learned and lik.weighted


@pytest.mark.parametrize("name, value", [("nu", 0.0), ("a", -1.0), ("b", float("nan"))])
def test_bad_settings_name_the_parameter(name, value):
    with pytest.raises(ValueError, match=name):
        bmc.likelihoods.StudentT(**{name: value})


def test_outputs_are_the_t_distributions():
    lik = bmc.likelihoods.StudentT(nu=5.0)
    y, mean, inv_tau = np.array([0.3, -2.0, 7.0]), np.array([0.0, 0.5, 1.0]), 0.25
    np.testing.assert_allclose(
        lik.log_density(y, mean, inv_tau), stats.t.logpdf(y, 5.0, loc=mean, scale=0.5)
    )
    assert lik.noise_variance(0.25) == pytest.approx(0.25 * 5.0 / 3.0)
    assert bmc.likelihoods.StudentT(nu=2.0).noise_variance(0.25) == np.inf
    draws = lik.noise_draws(np.random.default_rng(0), (200_000,), inv_tau)
    # the draws' variance nu/(nu-2)/tau within 5 of its standard errors (kurtosis of t_5: 9 + 3)
    se = np.sqrt((12.0 - 1.0) / draws.size) * lik.noise_variance(inv_tau)
    assert abs(draws.var() - lik.noise_variance(inv_tau)) < 5 * se


def _noise_data(seed=5, n=80, scale=0.5):
    rng = np.random.default_rng(seed)
    rows, cols = _positions(seed, n=n)
    y = scale * rng.standard_t(LIK.nu, size=rows.size)
    return bmc.RatingData(rows, cols, y, (M1, M2)), y


def _exact_tau_moments(y, lik):
    """Mean and sd of ``p(tau | y)`` by quadrature (log density shifted at its mode)."""

    def log_post(t):
        return stats.gamma.logpdf(t, lik.a, scale=1 / lik.b) + np.sum(
            stats.t.logpdf(y, lik.nu, scale=t**-0.5)
        )

    grid = np.linspace(1e-3, 100.0, 20_001)
    lp = np.array([log_post(t) for t in grid])
    mode, lp0 = grid[np.argmax(lp)], lp.max()
    upper = grid[np.flatnonzero(lp > lp0 - 60.0)[-1]] * 2  # beyond: below exp(-60) of the mode
    moments = [
        integrate.quad(
            lambda t, k=k: t**k * np.exp(log_post(t) - lp0), 0, upper, points=[mode], limit=200
        )[0]
        for k in range(3)
    ]
    mean = moments[1] / moments[0]
    return mean, np.sqrt(moments[2] / moments[0] - mean**2)


def _fit(data, method, **kw):
    return bmc.fit(
        data,
        K=2,
        prior=bmc.priors.Fixed(gamma=1e-6),
        likelihood=LIK,
        method=method,
        center=False,
        clip=False,
        seed=0,
        progress_bar=False,
        dtype="float64",
        **kw,
    )


@pytest.mark.parametrize(
    "method, kw",
    [
        ("gibbs", dict(num_warmup=500, num_samples=3000, num_chains=4)),
        pytest.param(
            "nuts", dict(num_warmup=400, num_samples=1000, num_chains=2), marks=pytest.mark.slow
        ),
    ],
)
def test_tau_posterior_is_exact(method, kw):
    data, y = _noise_data()
    fit = _fit(data, method, **kw)
    tau = np.asarray(fit.samples["tau"], np.float64)
    mean, sd = _exact_tau_moments(y, LIK)
    _agreement(tau[..., None], mean, sd, f"{method} tau")
    # the outputs ask the likelihood: the noise variance of t_nu, and the t density
    expected = LIK.noise_variance(np.mean(1.0 / tau))
    assert fit.noise_var() == pytest.approx(expected, rel=1e-12)


def test_log_predictive_density_is_the_t_mixture():
    data, y = _noise_data(n=60)
    fit = _fit(data, "gibbs", num_warmup=50, num_samples=100, store_factors=True)
    lpd = fit.log_predictive_density(data)
    tau = np.asarray(fit.samples["tau"], np.float64).reshape(-1)
    theta = np.einsum(
        "sik,sik->si",
        np.asarray(fit.samples["M"], np.float64).reshape(tau.size, M1, 2)[:, data.rows],
        np.asarray(fit.samples["N"], np.float64).reshape(tau.size, M2, 2)[:, data.cols],
    )
    lp = stats.t.logpdf(y[None], LIK.nu, loc=theta, scale=tau[:, None] ** -0.5)
    expected = np.mean(special.logsumexp(lp, axis=0) - np.log(tau.size))
    assert lpd == pytest.approx(expected, rel=1e-10)


def test_unsupported_combinations_are_clear_errors():
    data, _ = _noise_data(n=40)
    from bmczoo.inference import gibbs
    from bmczoo.inference.settings import SweepOptions

    with pytest.raises(ValueError, match="annealed switch .* student-t"):
        gibbs.build_problem(data, 1.0, likelihood=LIK, options=SweepOptions(anneal_steps=5))
    with pytest.raises(ValueError, match="student-t likelihood runs on one device"):
        _fit(data, "vb", devices=jax.devices()[:1])


def test_saved_fit_predicts_what_the_fit_predicted(tmp_path):
    data, _ = _noise_data(n=60)
    train, test = data.split(test_fraction=0.25, seed=0)
    fit = _fit(train, "gibbs", num_warmup=10, num_samples=20)
    fit.save(tmp_path / "t.npz")
    back = bmc.load(tmp_path / "t.npz")
    assert back.info.likelihood == LIK
    assert np.array_equal(fit.predict(test.rows, test.cols), back.predict(test.rows, test.cols))
    assert back.log_predictive_density(test) == fit.log_predictive_density(test)
    assert back.noise_var() == fit.noise_var()


def test_predictive_interval_is_the_t_interval():
    """With theta's spread negligible (Fixed(1e-6)) the predictive is the noise's t_nu:
    the 90% interval's half-width is ``t_nu^-1(0.95) sqrt(E[1/tau])`` (its variance
    matched to ``noise_var()``), narrower than the Gaussian's of the same sd."""
    data, _ = _noise_data(n=60)
    fit = _fit(data, "gibbs", num_warmup=20, num_samples=40)
    lo, hi = fit.predictive_interval(data.rows[:5], data.cols[:5], prob=0.9)
    inv_tau = np.mean(1.0 / np.asarray(fit.samples["tau"], np.float64))
    half = stats.t.ppf(0.95, LIK.nu) * np.sqrt(inv_tau)
    np.testing.assert_allclose((hi - lo) / 2, half, rtol=1e-5)
    assert np.all((hi - lo) / 2 < stats.norm.ppf(0.95) * np.sqrt(fit.noise_var()))
