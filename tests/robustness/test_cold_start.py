"""Cold start: rows and columns without ratings get the prior.

For an empty row ``i`` the conditional of ``M_i`` is ``N(0, diag(gamma))`` whatever the
rest of the state, so in the Gibbs sampler its draws are, given the ``gamma`` of the
previous sweep, iid ``N(0, gamma)`` and independent of ``N``: the standardised draws
``z = M_ih / sqrt(gamma_h)`` are exactly iid N(0, 1) and the posterior mean of
``theta_ij = M_i . N_j`` is 0.  The tolerances are multiples of the exact Monte Carlo
standard errors of those iid averages.  In VB, ``q(M_i) = N(0, diag(1 / E[1/gamma]))``
exactly.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

import bmczoo as bmc
from bmczoo.priors import Discrete, Fixed, InverseGamma

from ._helpers import paper_problem

K = 3
NUM_DRAWS = 2000


# two-sided z bound with family-wise false-alarm rate 1e-4 over `count` comparisons
def _z_bound(count: int, alpha: float = 1e-4) -> float:
    return float(norm.isf(alpha / (2 * count)))


def cold_data() -> bmc.RatingData:
    """A 20 x 20 paper simulation with row 2 and column 5 emptied, grown to 21 x 22:
    empty rows {2, 20}, empty columns {5, 20, 21}."""
    train = paper_problem(20, seed=3).train
    keep = (train.rows != 2) & (train.cols != 5)
    return bmc.RatingData(train.rows[keep], train.cols[keep], train.values[keep], (21, 22))


EMPTY_ROWS, EMPTY_COLS = np.array([2, 20]), np.array([5, 20, 21])


def test_cold_data_has_the_empty_rows_and_columns():
    data = cold_data()
    assert np.flatnonzero(data.row_counts == 0).tolist() == EMPTY_ROWS.tolist()
    assert np.flatnonzero(data.col_counts == 0).tolist() == EMPTY_COLS.tolist()


def _gibbs(prior):
    data = cold_data()
    m1, m2 = data.shape
    # every entry of the empty rows and columns
    pr = np.concatenate([np.repeat(EMPTY_ROWS, m2), np.tile(np.arange(m1), EMPTY_COLS.size)])
    pc = np.concatenate([np.tile(np.arange(m2), EMPTY_ROWS.size), np.repeat(EMPTY_COLS, m1)])
    # the plain sweep: the claims below are about its conditionals (draw t of M uses the
    # gamma of sweep t - 1; the column moves would redraw M_h, N_h after a new gamma_h)
    fit = bmc.fit(
        data,
        K,
        prior,
        "gibbs",
        num_warmup=5,
        num_samples=NUM_DRAWS,
        thinning=1,
        num_chains=1,
        column_moves=False,
        predict=(pr, pc),
        center=False,
        clip=False,
        store_factors=True,
        progress_bar=False,
        track=0,
    )
    return fit, pr, pc


# the default suite runs the inverse-gamma case (gamma changes from sweep to sweep); the
# others (the same standardised draws under the same key) with -m slow
PRIORS = [
    pytest.param(Fixed(0.5), id="fixed", marks=pytest.mark.slow),
    pytest.param(InverseGamma(a=2.0, b=0.5), id="inverse-gamma"),
    pytest.param(Discrete(C=1.0, p=0.3, eps=0.05), id="discrete", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("prior", PRIORS)
def test_gibbs_empty_rows_and_columns_get_the_prior(prior):
    fit, pr, pc = _gibbs(prior)
    M = fit.samples["M"][0].astype(np.float64)  # (draw, m1, K)
    N = fit.samples["N"][0].astype(np.float64)
    gamma = fit.samples["gamma"][0].astype(np.float64)  # (draw, K): gamma after sweep t
    assert M.shape[0] == NUM_DRAWS

    # draw t of M and N used the gamma of sweep t - 1 (kept draws are consecutive sweeps)
    sd = np.sqrt(gamma[:-1])[:, None, :]
    z = np.concatenate([(M[1:, EMPTY_ROWS] / sd).ravel(), (N[1:, EMPTY_COLS] / sd).ravel()])
    count = z.size  # iid N(0, 1) under the claim
    bound = _z_bound(4)
    assert abs(z.mean()) <= bound / np.sqrt(count), z.mean()
    assert abs(np.mean(z**2) - 1.0) <= bound * np.sqrt(2.0 / count), np.mean(z**2)
    assert abs(np.mean(z**4) - 3.0) <= bound * np.sqrt(96.0 / count), np.mean(
        z**4
    )  # Var(z^4) = 105 - 9
    # no correlation between successive draws (each is a fresh draw from the prior)
    lag = np.concatenate([(M[2:, EMPTY_ROWS] * M[1:-1, EMPTY_ROWS] / (sd[1:] * sd[:-1])).ravel()])
    assert abs(lag.mean()) <= bound / np.sqrt(lag.size), lag.mean()
    if isinstance(prior, Fixed):  # the marginal itself is the prior N(0, gamma0)
        x = M[:, EMPTY_ROWS].ravel()
        assert abs(np.var(x) / prior.gamma - 1.0) <= bound * np.sqrt(2.0 / x.size)

    # posterior mean of theta over the empty rows/columns is 0 within its MC error: the
    # terms M_i^(t) . N_j^(t) have mean 0 and are uncorrelated over t (M_i^(t) is a fresh
    # draw independent of N^(t) and of the past), so SE = sqrt(sum_t term_t^2) / T
    terms = np.einsum("tpk,tpk->tp", M[:, pr], N[:, pc])  # (draw, entry)
    pred = fit.predict(pr, pc)
    np.testing.assert_allclose(pred, terms.mean(axis=0), rtol=1e-4, atol=1e-4 * np.abs(terms).max())
    se = np.sqrt(np.sum(terms**2, axis=0)) / NUM_DRAWS
    worst = np.max(np.abs(pred) / se)
    assert worst <= _z_bound(pr.size), (
        f"posterior mean of theta on empty rows/cols is {worst:.2f} SE from 0"
    )


@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(jnp.float32, id="float32", marks=pytest.mark.slow),
        pytest.param(jnp.float64, id="float64"),
    ],
)
@pytest.mark.parametrize("prior", PRIORS)
def test_vb_empty_rows_and_columns_get_the_prior(prior, dtype):
    """After iteration k+1, q(M_i) of an empty row is N(0, diag(1/w)) with w the
    E[1/gamma] after iteration k (the run stopped at k gives w); same for columns."""
    data = cold_data()
    runs = [
        bmc.fit(
            data,
            K,
            prior,
            "vb",
            max_iter=k,
            tol=0.0,
            center=False,
            clip=False,
            dtype=dtype,
            progress_bar=False,
        )
        for k in (3, 4)
    ]
    before, after = runs
    assert before.meta["num_iter"] == 3 and after.meta["num_iter"] == 4
    w = before.q_gamma["inv_mean"]
    rtol = 1e-14 if dtype == jnp.float64 else 5e-7
    assert np.all(after.m[EMPTY_ROWS] == 0.0) and np.all(after.n[EMPTY_COLS] == 0.0)
    np.testing.assert_allclose(
        after.V_diag[EMPTY_ROWS], np.broadcast_to(1.0 / w, (EMPTY_ROWS.size, K)), rtol=rtol
    )
    np.testing.assert_allclose(
        after.W_diag[EMPTY_COLS], np.broadcast_to(1.0 / w, (EMPTY_COLS.size, K)), rtol=rtol
    )
    if after.state is not None:  # full covariances: diagonal
        V = np.asarray(after.state.V[0])[EMPTY_ROWS]
        W = np.asarray(after.state.W[0])[EMPTY_COLS]
        off = ~np.eye(K, dtype=bool)
        assert np.all(V[:, off] == 0.0) and np.all(W[:, off] == 0.0)
    # the predictions there are exactly the (zero) prior mean
    m1, m2 = data.shape
    assert np.all(
        after.predict(np.repeat(EMPTY_ROWS, m2), np.tile(np.arange(m2), EMPTY_ROWS.size)) == 0.0
    )
    assert np.all(
        after.predict(np.tile(np.arange(m1), EMPTY_COLS.size), np.repeat(EMPTY_COLS, m1)) == 0.0
    )
    if isinstance(prior, Fixed):
        np.testing.assert_allclose(w, 1.0 / prior.gamma, rtol=rtol)
