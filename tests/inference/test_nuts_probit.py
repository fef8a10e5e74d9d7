"""The Gibbs sampler (latent ``z`` block, cut-point MH) and NumPyro's NUTS on
:func:`bmczoo.models.matrix_completion` with the probit / ordered-probit likelihood sample
the same posterior (``slow``).

A 12 x 10 matrix with half the entries observed (rank-2 latent signal, K = 2, the
inverse-gamma prior, float64).  Compared: the posterior means of ``theta`` at two observed
and two unobserved entries, of ``P(Y = top level | theta, c)`` there (identified, unlike
``M`` and ``N``), and of each cut point (ordered probit).  Tolerance as in
``test_nuts_agreement.py``: ``|a - b| < z_crit sqrt(mcse_a^2 + mcse_b^2)`` with ArviZ's
MCSE of the mean, ``z_crit`` the two-sided Bonferroni threshold at familywise level 1%;
both runs must first reach R-hat < 1.05.  Also checked: the fit's ``predict_proba`` at
the requested entries is the mean over the Gibbs draws of the level probabilities.
"""

from __future__ import annotations

from statistics import NormalDist

import arviz as az
import jax
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS

import bmczoo as bmc
from bmczoo.inference.results.levels import level_log_probs_np
from bmczoo.likelihoods import OrderedProbit, Probit

pytestmark = [pytest.mark.usefixtures("x64"), pytest.mark.slow]

M1, M2, K = 12, 10, 2
PRIOR = bmc.priors.InverseGamma(3.0, 2.0)
ALPHA = 0.01
LIKS = {
    "probit": Probit(threshold=0.1),
    "ordered": OrderedProbit(levels=(1.0, 2.0, 3.0), cut_scale=2.0),
}


def _problem(lik):
    rng = np.random.default_rng(4)
    U, V = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    z = U @ V.T + rng.normal(size=(M1, M2))
    obs = rng.random((M1, M2)) < 0.5
    r, c = np.nonzero(obs)
    y = (z > 0.1).astype(float) if isinstance(lik, Probit) else 1.0 + np.digitize(z, [-0.7, 0.7])
    ur, uc = np.nonzero(~obs)
    er = np.array([r[0], r[len(r) // 2], ur[0], ur[-1]])
    ec = np.array([c[0], c[len(c) // 2], uc[0], uc[-1]])
    return bmc.RatingData(r, c, y[r, c], (M1, M2)), er, ec


def _top_proba(theta, cuts):
    """P(top level | theta, c): theta (C, S, E), cuts (C, S, L-1)."""
    return np.exp(level_log_probs_np(theta, cuts[:, :, None, :]))[..., -1]


def _mean_mcse(x):
    ds = az.convert_to_dataset({"x": x})
    return (
        x.mean(axis=(0, 1)),
        np.asarray(az.mcse(ds, method="mean")["x"].values),
        np.asarray(az.rhat(ds)["x"].values),
    )


@pytest.mark.parametrize("name", list(LIKS))
def test_gibbs_agrees_with_nuts(name):
    lik = LIKS[name]
    data, er, ec = _problem(lik)
    mcmc = MCMC(
        NUTS(bmc.models.matrix_completion),
        num_warmup=400,
        num_samples=600,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), data, K, PRIOR, likelihood=lik)
    s = mcmc.get_samples(group_by_chain=True)
    th_n = np.einsum("cdek,cdek->cde", np.asarray(s["M"])[:, :, er], np.asarray(s["N"])[:, :, ec])
    L1 = lik.num_levels - 1
    cuts_n = (
        np.asarray(s["cuts"], np.float64)
        if "cuts" in s
        else np.broadcast_to(np.asarray(lik.fixed_cuts()), th_n.shape[:2] + (L1,))
    )
    fit = bmc.fit(
        data,
        K=K,
        prior=PRIOR,
        likelihood=lik,
        num_warmup=1000,
        num_samples=4000,
        thinning=2,
        num_chains=4,
        track=(er, ec),
        predict=(er, ec),
        seed=1,
        progress_bar=False,
        dtype="float64",
    )
    th_g = np.asarray(fit.samples["theta"], np.float64)
    cuts_g = (
        np.asarray(fit.samples["cuts"], np.float64)
        if "cuts" in fit.samples
        else np.broadcast_to(np.asarray(lik.fixed_cuts()), th_g.shape[:2] + (L1,))
    )
    # predict_proba (running sums) is the mean over the kept draws
    P = fit.predict_proba(er, ec)
    P = P if P.ndim == 2 else np.column_stack([1 - P, P])
    np.testing.assert_allclose(P[:, -1], _top_proba(th_g, cuts_g).mean(axis=(0, 1)), rtol=1e-8)
    blocks_n = [th_n, _top_proba(th_n, cuts_n)] + ([cuts_n] if "cuts" in s else [])
    blocks_g = [th_g, _top_proba(th_g, cuts_g)] + ([cuts_g] if "cuts" in fit.samples else [])
    a = [_mean_mcse(x) for x in blocks_n]
    b = [_mean_mcse(x) for x in blocks_g]
    rhat = np.concatenate([x[2] for x in a + b])
    assert np.all(rhat < 1.05), f"not converged: rhat {np.round(rhat, 3)}"
    z = np.concatenate([(x[0] - y[0]) / np.sqrt(x[1] ** 2 + y[1] ** 2) for x, y in zip(a, b)])
    z_crit = NormalDist().inv_cdf(1 - ALPHA / (2 * z.size))
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: Gibbs and NUTS disagree, z = {np.round(z, 2)} (z_crit {z_crit:.2f}); "
        f"nuts {[np.round(x[0], 3) for x in a]} gibbs {[np.round(x[0], 3) for x in b]}"
    )
