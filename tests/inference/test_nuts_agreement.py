"""The Gibbs sampler and NumPyro's NUTS sample the same posterior.

On a 20 x 20 matrix with 30% of the entries observed (a rank-2 signal plus N(0, 1)
noise; K = 2, ordinary posterior tau = 1, float64) both samplers are run on
:func:`bmczoo.models.matrix_completion` and compared on the posterior mean and sd of
``theta`` at three observed and three unobserved entries (``theta = M N^T`` is
identified even though ``M`` and ``N`` are not: sign flips, rotations and column swaps
leave it unchanged).  The discrete prior is integrated out in the model, so NUTS applies
to every prior.

Tolerance: ``|a - b| < z_crit * sqrt(mcse_a^2 + mcse_b^2)`` with ArviZ's MCSE of the
mean (``az.mcse(method="mean")``) or of the sd (``method="sd")``) of each sampler's
chains, and ``z_crit`` the Bonferroni threshold for a familywise level of 1% over the 12
comparisons (two-sided): ``Phi^-1(1 - 0.01 / 24)`` = 3.34.  Both runs must first pass
R-hat < 1.05 (else the MCSEs mean nothing).

Seeds, one rule for every prior, fixed before any run: NUTS seed 0, Gibbs seed 1; a
chance failure is answered with more draws, never with another seed.

The discrete prior: its posterior here has a second mode, one column in the spike (about
1% of the draws of the Gibbs sampler with its column moves, which move between the two),
and neither NUTS nor the plain Gibbs sweep crosses between the modes (see
``benchmarks/bench_gibbs_vs_nuts.py``).  So the test compares what both samplers can
sample, the posterior within the all-slab mode: the plain sweep started in the slab (its
default start) against NUTS started at the plain sweep's final states; and it checks
that this mode holds nearly all the mass (the moves' rank posterior puts at least 0.95 on
every column in the slab).  The moves themselves are calibrated by
``test_sbc.py`` and the Geweke tests.

The default suite runs the fixed prior with short chains; ``-m slow`` runs all four
priors with longer chains.
"""

from __future__ import annotations

import math

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS

import bmczoo as bmc

from ._geweke import bonferroni_z

pytestmark = pytest.mark.usefixtures("x64")

M, K = 20, 2

PRIORS = {
    "fixed": bmc.priors.Fixed(1.0),
    "inverse-gamma": bmc.priors.InverseGamma(3.0, 2.0),
    # prior mean of gamma (d + 1) / beta^2 = 1 for d = 40
    "gamma": bmc.priors.Gamma(beta=math.sqrt(41.0)),
    "discrete": bmc.priors.Discrete(C=1.0, p=0.5, eps=0.05),
}


def _problem():
    rng = np.random.default_rng(3)
    keys = np.sort(rng.choice(M * M, size=int(0.3 * M * M), replace=False))
    rows, cols = np.divmod(keys, M)
    U, V = rng.normal(size=(M, 2)), rng.normal(size=(M, 2))
    y = np.sum(U[rows] * V[cols], axis=1) + rng.normal(size=rows.size)
    data = bmc.RatingData(rows, cols, y, (M, M))
    observed = set(zip(rows.tolist(), cols.tolist()))
    unobserved = [
        (i, j) for i, j in [(1, 0), (7, 3), (19, 19), (5, 12), (11, 2)] if (i, j) not in observed
    ][:3]
    entries = [(int(rows[k]), int(cols[k])) for k in (0, 40, 80)] + unobserved
    assert len(set(entries)) == 6
    er = np.array([e[0] for e in entries])
    ec = np.array([e[1] for e in entries])
    return data, er, ec


NUTS_SEED, GIBBS_SEED = 0, 1


def run_nuts(
    data, prior, er, ec, *, num_warmup, num_samples, num_chains=4, seed=NUTS_SEED, init_params=None
):
    """theta at (er, ec) per NUTS draw (chain, draw, entry) and the samples; ``init_params``
    (M, N with a chain axis) where the chains start (None: NumPyro's default)."""
    mcmc = MCMC(
        NUTS(bmc.models.matrix_completion),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(seed), data, K, prior, init_params=init_params)
    s = mcmc.get_samples(group_by_chain=True)
    Ms, Ns = np.asarray(s["M"]), np.asarray(s["N"])
    return np.einsum("cdek,cdek->cde", Ms[:, :, er], Ns[:, :, ec]), s


def run_gibbs(
    data,
    prior,
    er,
    ec,
    *,
    num_warmup,
    num_samples,
    num_chains=4,
    seed=GIBBS_SEED,
    column_moves=None,
):
    """theta at (er, ec) per Gibbs draw: (chain, draw, entry), and the fit (``column_moves``
    as ``bmc.fit``'s: None, the moves where the prior has one)."""
    fit = bmc.fit(
        data,
        K=K,
        prior=prior,
        method="gibbs",
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=1,
        num_chains=num_chains,
        center=False,  # the model has no offset: compare the same posterior
        clip=False,
        track=(er, ec),
        predict=(er, ec),
        store_factors=True,
        column_moves=column_moves,
        progress_bar=False,
        seed=seed,
    )
    return np.asarray(fit.samples["theta"], np.float64), fit


def _summaries(theta):
    ds = az.convert_to_dataset({"theta": theta})
    return {
        "mean": theta.mean(axis=(0, 1)),
        "sd": theta.std(axis=(0, 1), ddof=1),
        "mcse_mean": az.mcse(ds, method="mean")["theta"].values,
        "mcse_sd": az.mcse(ds, method="sd")["theta"].values,
        "rhat": az.rhat(ds)["theta"].values,
        "ess": az.ess(ds)["theta"].values,
    }


def check_agreement(name, *, nuts_warmup, nuts_samples, gibbs_warmup, gibbs_samples):
    data, er, ec = _problem()
    prior = PRIORS[name]
    discrete = isinstance(prior, bmc.priors.Discrete)
    # discrete: the plain sweep and NUTS started where it ends, both in the all-slab mode
    th_gibbs, fit = run_gibbs(
        data,
        prior,
        er,
        ec,
        num_warmup=gibbs_warmup,
        num_samples=gibbs_samples,
        column_moves=False if discrete else None,
    )
    init = None
    if discrete:
        assert np.all(np.asarray(fit.samples["gamma"]) == prior.C), (
            "the plain sweep left the all-slab mode"
        )
        init = {
            "M": jnp.asarray(fit.samples["M"][:, -1]),
            "N": jnp.asarray(fit.samples["N"][:, -1]),
        }
    th_nuts, nuts_draws = run_nuts(
        data, prior, er, ec, num_warmup=nuts_warmup, num_samples=nuts_samples, init_params=init
    )
    assert np.all(np.isfinite(th_nuts)) and np.all(np.isfinite(th_gibbs))
    a, b = _summaries(th_nuts), _summaries(th_gibbs)
    assert np.all(a["rhat"] < 1.05), f"NUTS did not converge: rhat {a['rhat']}"
    assert np.all(b["rhat"] < 1.05), f"Gibbs did not converge: rhat {b['rhat']}"
    # the running posterior mean of the fit is the mean of the same draws
    np.testing.assert_allclose(
        fit.predict(er, ec), th_gibbs.mean(axis=(0, 1)), rtol=1e-9, atol=1e-12
    )

    z_mean = (a["mean"] - b["mean"]) / np.sqrt(a["mcse_mean"] ** 2 + b["mcse_mean"] ** 2)
    z_sd = (a["sd"] - b["sd"]) / np.sqrt(a["mcse_sd"] ** 2 + b["mcse_sd"] ** 2)
    z = np.concatenate([z_mean, z_sd])
    z_crit = bonferroni_z(z.size)
    report = "\n".join(
        f"  theta({r},{c}): mean nuts {a['mean'][e]:+.4f} gibbs {b['mean'][e]:+.4f} (z {z_mean[e]:+.2f}); "
        f"sd nuts {a['sd'][e]:.4f} gibbs {b['sd'][e]:.4f} (z {z_sd[e]:+.2f}); "
        f"ess nuts {a['ess'][e]:.0f} gibbs {b['ess'][e]:.0f}"
        for e, (r, c) in enumerate(zip(er, ec))
    )
    assert np.max(np.abs(z)) < z_crit, (
        f"{name}: NUTS and Gibbs disagree (z_crit {z_crit:.2f}):\n{report}"
    )
    if discrete:
        # NUTS stayed in the all-slab mode (its slab probabilities given M, N), and that
        # mode holds nearly all the posterior mass (the moves' rank posterior)
        slab = np.asarray(nuts_draws["gamma_slab_prob"])
        assert np.min(slab) > 0.5, (
            f"NUTS left the all-slab mode: min slab probability {np.min(slab):.3g}"
        )
        _, moves = run_gibbs(
            data, prior, er, ec, num_warmup=gibbs_warmup, num_samples=gibbs_samples // 4
        )
        p_all = moves.rank_posterior(prior.active_threshold())[K]
        assert p_all >= 0.95, f"the all-slab mode holds only {p_all:.3f} of the moves' draws"


def test_nuts_agreement_fixed_quick():
    # compiling NUTS dominates (~5 s); the draws themselves are cheap
    check_agreement(
        "fixed", nuts_warmup=300, nuts_samples=700, gibbs_warmup=100, gibbs_samples=1500
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PRIORS))
def test_nuts_agreement(name):
    check_agreement(name, nuts_warmup=1000, nuts_samples=1500, gibbs_warmup=500, gibbs_samples=6000)


def test_discrete_model_has_finite_gradients():
    """NUTS needs the gradient of the log density of the model with the discrete prior
    integrated out.  Where the posterior slab probability of a column given ``M``
    saturates to 1 in floating point (any column with ``S_h`` of order ``m eps log(C/eps)``
    or more, i.e. the typical set of any realistic problem) the gradient must stay finite
    (NaN gradients there made NUTS fail with "Cannot find valid initial parameters")."""
    from numpyro.infer.util import log_density

    data, _, _ = _problem()
    prior = PRIORS["discrete"]
    rng = np.random.default_rng(0)
    Mv = jnp.asarray(rng.normal(size=(M, K)))  # S_h ~ 20: slab logit ~ 160, sigmoid == 1.0
    Nv = jnp.asarray(rng.normal(size=(M, K)))

    def logp(Mv, Nv):
        return log_density(bmc.models.matrix_completion, (data, K, prior), {}, {"M": Mv, "N": Nv})[
            0
        ]

    value, (gM, gN) = jax.jit(jax.value_and_grad(logp, argnums=(0, 1)))(Mv, Nv)
    assert np.isfinite(float(value))
    assert np.all(np.isfinite(np.asarray(gM))), (
        "d log p / dM is not finite (slab probability saturated)"
    )
    assert np.all(np.isfinite(np.asarray(gN)))


def test_run_nuts_starts_where_init_params_say():
    """``baselines.run_nuts(init_params=...)`` reaches NumPyro: with the same seed, the same
    start gives the same draws and another start other draws (a start that were ignored
    would give the same draws for both)."""
    from types import SimpleNamespace

    from bmczoo.inference.baselines import run_nuts as baseline_nuts

    data, _, _ = _problem()
    rng = np.random.default_rng(0)
    starts = [{"M": rng.normal(size=(2, M, K)), "N": rng.normal(size=(2, M, K))} for _ in range(2)]

    model = SimpleNamespace(
        K=K,
        prior=PRIORS["fixed"],
        likelihood=bmc.likelihoods.Tempered(),
        biases=None,
        seed=0,
        dtype=jnp.float64,
    )
    settings = bmc.inference.NUTS(num_warmup=5, num_samples=3, thinning=1, num_chains=2)

    def draws(init):
        s, _ = baseline_nuts(
            data,
            model,
            settings,
            progress_bar=False,
            chain_method="vectorized",
            init_params=init,
        )
        return s["M"]

    a, again, b = draws(starts[0]), draws(starts[0]), draws(starts[1])
    assert a.shape == (2, 3, M, K)
    np.testing.assert_array_equal(a, again)
    assert not np.allclose(a, b)
