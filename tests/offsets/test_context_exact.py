"""The context offset's posterior against its closed form, by NUTS on the NumPyro model
and by the Gibbs sweep (float64).

With ``Fixed(gamma=1e-6)`` the factor term is ~1e-6, negligible against the Monte Carlo
error, and with the groups' precisions pinned at 1 (``Context(a=1e6, b=1e6)``: sd 1e-3)
and a known noise (``noise_sd = 0.5``) the model is the linear regression
``y = X w + N(0, 0.25)``, ``w ~ N(0, I)``: ``w | y ~ N(P^-1 tau X^T y, P^-1)`` with
``P = I + tau X^T X``.  Each method's posterior mean of every weight agrees with the
exact one within ``z_crit`` Monte Carlo standard errors (ArviZ's MCSE of the mean),
``z_crit`` the two-sided Bonferroni threshold at a familywise level of 1%.
"""

from __future__ import annotations

from statistics import NormalDist

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS

import bmczoo as bmc
from bmczoo.data import Features
from bmczoo.inference import gibbs

pytestmark = pytest.mark.usefixtures("x64")

M1, M2, N_OBS, K, SD = 10, 8, 50, 2, 0.5
PRIOR = bmc.priors.Fixed(gamma=1e-6)
CONTEXT = bmc.offsets.Context(a=1e6, b=1e6)


def _problem():
    rng = np.random.default_rng(0)
    key = np.sort(rng.choice(M1 * M2, N_OBS, replace=False))
    rows, cols = key // M2, key % M2
    dense = np.zeros((N_OBS, 3 + M1))
    b = rng.integers(0, 3, N_OBS)
    dense[np.arange(N_OBS), b] = 1.0
    dense[np.arange(N_OBS), 3 + rows] = rng.uniform(-1, 1, N_OBS)
    names = [f"bin={i}" for i in range(3)] + [f"dev={i}" for i in range(M1)]
    w = rng.normal(size=dense.shape[1])
    y = dense @ w + SD * rng.normal(size=N_OBS)
    data = bmc.RatingData(rows, cols, y, (M1, M2), context=Features.from_dense(dense, names))
    tau = 1.0 / SD**2
    P = np.eye(dense.shape[1]) + tau * dense.T @ dense
    mean = np.linalg.solve(P, tau * dense.T @ y)
    return data, mean


def _check(draws, mean):
    """draws (chains, draws, F) against the exact posterior mean."""
    mcse = _mcse(draws)
    z = (np.asarray(draws).mean((0, 1)) - mean) / mcse
    z_crit = NormalDist().inv_cdf(1 - 0.01 / (2 * mean.size))
    assert np.max(np.abs(z)) < z_crit, np.round(z, 2)


def _mcse(draws):
    ds = az.convert_to_dataset({"w": np.asarray(draws)})
    return np.asarray(az.mcse(ds, method="mean")["w"]).reshape(-1)


def test_nuts_on_the_model_matches_the_closed_form():
    data, mean = _problem()
    lik = bmc.likelihoods.Tempered(noise_sd=SD)
    mcmc = MCMC(
        NUTS(bmc.models.matrix_completion),
        num_warmup=400,
        num_samples=600,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), data, K, PRIOR, likelihood=lik, offsets=(CONTEXT,))
    _check(mcmc.get_samples(group_by_chain=True)["context_w"], mean)


def test_gibbs_matches_the_closed_form():
    data, mean = _problem()
    p = gibbs.build_problem(data, 1.0 / SD**2, dtype=jnp.float64, offsets=(CONTEXT,), prior=PRIOR)
    st = gibbs.init(jax.random.split(jax.random.key(1), 4), p, PRIOR, K)
    sweep = jax.jit(lambda s: gibbs.sweep(s, p, PRIOR))
    draws = []
    for i in range(1100):
        st = sweep(st)
        if i >= 100:
            draws.append(np.asarray(st.offset_state["context"]["w"]))
    _check(np.stack(draws, axis=1), mean)
