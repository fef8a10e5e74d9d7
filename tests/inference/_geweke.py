"""The Geweke (2004) joint-distribution harness shared by the Gibbs blocks' tests.

A component's test supplies the two simulations of the joint of its variables and data:

* marginal-conditional: exact draws of the model (numpy/scipy), mapped to test functions;
* successive-conditional: ``C`` independent chains, each started at an exact joint draw,
  whose every step is the block under test followed by a fresh draw of the data given the
  parameters (:func:`run_chains` runs them; :func:`with_ratings` gives a step the problem
  holding its chain's current ratings).

Under the null hypothesis every state of every chain is an exact joint draw and the chains'
time averages are iid across chains, so the successive-conditional standard error of a
test function is the sd of the ``C`` chain means over ``sqrt(C)`` (exact, no batch means),
and :func:`z_scores` compares the two simulations with a Bonferroni threshold at a
familywise level of :data:`FAMILYWISE_ALPHA` (two-sided).  A test asserts
``max |z| < z_crit``; its power check asserts that a deliberately wrong block gives
``max |z| > 2 z_crit``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from statistics import NormalDist

import jax
import numpy as np

FAMILYWISE_ALPHA = 0.01

# XLA's CPU backend optimisations triple the compile time of a sweep for a 3x faster sweep:
# on the tests' tiny problems compiling is the cost.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def bonferroni_z(num_functions: int, alpha: float = FAMILYWISE_ALPHA) -> float:
    """The two-sided Bonferroni critical value for ``num_functions`` z-scores."""
    return NormalDist().inv_cdf(1.0 - alpha / (2 * num_functions))


def z_scores(succ: np.ndarray, marg: np.ndarray) -> tuple[np.ndarray, float]:
    """Geweke z-scores of the successive-conditional chains ``succ`` (chains, steps, F)
    against the marginal-conditional draws ``marg`` (draws, F), and the Bonferroni critical
    value.  Functions constant in the model (e.g. the biases when they are off) have se 0
    and are left out."""
    assert np.all(np.isfinite(succ)), "non-finite test function along the Gibbs chains"
    assert succ.shape[-1] == marg.shape[-1], (succ.shape, marg.shape)
    chain_means = succ.mean(axis=1)  # iid across chains under H0 (stationary starts)
    se = np.sqrt(
        chain_means.var(axis=0, ddof=1) / succ.shape[0] + marg.var(axis=0, ddof=1) / marg.shape[0]
    )
    keep = se > 0
    z = (chain_means.mean(axis=0) - marg.mean(axis=0))[keep] / se[keep]
    return z, bonferroni_z(z.size)


def with_ratings(problem, Y, row_order, col_order):
    """``problem`` holding the ratings ``Y`` (in the template's entry order): only the
    values of its row and column views change."""
    return dataclasses.replace(
        problem,
        rows=problem.rows._replace(values=Y[row_order]),
        cols=problem.cols._replace(values=Y[col_order]),
    )


def run_chains(one_step: Callable, carry, num_steps: int) -> np.ndarray:
    """The test functions along the chains: ``one_step(carry, None) -> (carry, f)`` scanned
    ``num_steps`` times from ``carry`` (a pytree whose leaves have the chains on their
    leading axis), every chain at once; returns ``f`` as (chains, steps, F).

    A fresh compiled function per call, so that a block monkeypatched by a power check is
    traced anew."""

    def chain(c):
        return jax.lax.scan(one_step, c, None, length=num_steps)[1]

    return np.asarray(jax.jit(jax.vmap(chain), compiler_options=FAST_COMPILE)(carry))
