"""Simulation-based calibration (Talts et al. 2018) of the Gibbs sampler (``_sbc.py``).

Problem: 20 x 20, 30% of the entries observed (a fixed pattern), K = 3, float64; the
ordinary posterior (noise sd 1) or a learned noise precision.  Per run: 200 replications
drawn from the model, one chain each from the sampler's default start, 50 warm-up sweeps,
then 49 draws kept every 3 sweeps (ranks 0..49, 10 bins of 5).  Tested statistics: theta
at two observed and two unobserved entries, the prior's summary (the discrete prior's
active-column count, the sum of log gamma of the continuous column-scale priors, log det
Lambda_M of the Normal-Wishart prior) and tau where it is learned.  A run passes when
every statistic's chi-square p-value (9 degrees of freedom) is above 0.01 / S
(Bonferroni, familywise 1%).  Seeds are fixed before any run (seed 0 for every run):
the outcome is deterministic.

Cost: the module takes about 4.7 CPU-minutes (measured here, compilation included).

Power: the discrete prior's column move with the rescaling's Jacobian left out (the
wrong kernel of ``test_column_moves.py``'s power check) must fail, as must a learned
noise block with shape ``a + n`` instead of ``a + n/2`` (``test_geweke_components.py``).

The samplers run as each prior's default (``bmc.fit``'s ``column_moves=None``: the moves
where the prior has one, inside the sweep, every fourth sweep for the discrete prior), and the discrete prior once more with the annealed spike/slab
switch added as ``bmc.fit(anneal_steps=5, anneal_every=2)`` runs it (after the moves,
every other sweep).  The switch without the moves (the plain sweep, a 5-step switch
every sweep) does not calibrate here: from the slab start it keeps too many columns in
the slab within these sweeps (the true count ranked below every draw in about half the
replications), a failure to mix that SBC reports as it should.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import pytest

import bmczoo as bmc
from bmczoo.inference.gibbs import columns

from . import _sbc
from .test_geweke_components import TauShapeN

pytestmark = [pytest.mark.usefixtures("x64"), pytest.mark.slow]

SIZE = dict(
    num_replications=200, num_warmup=50, num_draws=49, thin=3, num_bins=10, alpha=0.01, seed=0
)

DISCRETE = bmc.priors.Discrete(C=1.0, p=0.5, eps=0.05)
INVERSE_GAMMA = bmc.priors.InverseGamma(3.0, 2.0)
LEARNED = bmc.likelihoods.LearnedNoise(a=6.0, b=5.0)

RUNS = {
    "fixed": dict(prior=bmc.priors.Fixed(1.0)),
    "inverse-gamma": dict(prior=INVERSE_GAMMA),
    # prior mean of gamma (d + 1) / beta^2 = 1 for d = 40
    "gamma": dict(prior=bmc.priors.Gamma(beta=math.sqrt(41.0))),
    "discrete": dict(prior=DISCRETE),
    "normal-wishart": dict(prior=bmc.priors.NormalWishart(beta0=2.0, nu0=7.0, W0_scale=0.5)),
    "inverse-gamma + learned noise": dict(prior=INVERSE_GAMMA, likelihood=LEARNED),
    # as bmc.fit(anneal_steps=...) runs it: the default moves, the switch every other sweep
    "discrete, annealed switch": dict(prior=DISCRETE, anneal_steps=5, anneal_every=2),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_sbc_ranks_are_uniform(name):
    res = _sbc.run_sbc(**RUNS[name], **SIZE)
    print(f"{name}: {res.report()}")  # pytest -s shows every run's ranks
    assert res.uniform, f"{name}: SBC ranks not uniform\n{res.report()}"


def test_sbc_detects_column_move_without_jacobian(monkeypatch):
    """The discrete prior's flip accepted without the Jacobian ``m log s`` of its rescaling."""
    monkeypatch.setattr(columns, "_log_jacobian", lambda m, log_s: jnp.zeros_like(log_s))
    _sbc.clear_compiled()  # the patched function must be traced afresh, and not reused after
    try:
        res = _sbc.run_sbc(DISCRETE, **SIZE)
    finally:
        _sbc.clear_compiled()
    print(res.report())
    assert not res.uniform, f"missing Jacobian not detected\n{res.report()}"
    assert res.p_values[res.names.index("active columns")] <= res.threshold, res.report()


def test_sbc_detects_wrong_noise_conditional():
    """A learned-noise block with shape ``a + n`` instead of ``a + n/2``."""
    res = _sbc.run_sbc(INVERSE_GAMMA, LEARNED, sampler_likelihood=TauShapeN(LEARNED), **SIZE)
    print(res.report())
    assert not res.uniform, f"wrong tau conditional not detected\n{res.report()}"
    assert res.p_values[res.names.index("tau")] <= res.threshold, res.report()
