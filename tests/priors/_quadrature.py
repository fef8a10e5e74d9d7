"""Reference values of the conditional of ``gamma_h`` by quadrature, independent of bmczoo.

The unnormalised conditional (and VB factor) of ``gamma_h`` is

    f(g) = prior(g) * g^(-d/2) * exp(-S / (2 g)),     g > 0.

With ``d ~ 10^4`` the factor ``g^(-d/2)`` over- or underflows for any ``g`` away from 1, so
everything is done in log space, on the log scale ``t = log g`` (where the density
``f(e^t) e^t`` is smooth, unimodal and at most exponentially tailed for every prior here):

1. the log integrand ``h(t) = log prior(e^t) - (d/2) t - (S/2) e^(-t) + t`` is evaluated on
   a wide coarse grid (``t`` in [-120, 120], step 1e-3) to locate where the integrands of
   every moment used (``g^k f``, ``k = -1..4``) are within ``e^-60`` of their maxima;
2. a fine uniform grid (``n_fine`` points) is laid over that region and the integrals are
   Riemann sums ``sum exp(h) dt`` computed with ``logsumexp``.  For a smooth integrand that
   decays to ``e^-60`` of its peak at both ends, the uniform rule equals the trapezoid rule
   and is spectrally accurate (error far below 1e-10 once the step is below a tenth of
   the width of the peak; the helper asserts that it is).

The helper is checked against closed forms (inverse gamma, GIG via scipy) in
``test_conditionals.py::test_quadrature_helper_*``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

T_MIN, T_MAX = -120.0, 120.0
MOMENT_POWERS = (-1, 0, 1, 2, 3, 4)


class LogScalePosterior:
    """Normalised density proportional to ``exp(log_prior(g)) g^(-d/2) exp(-S/(2g))``.

    Parameters
    ----------
    log_prior : callable
        Vectorised log density of the prior on ``g > 0`` (normalised if ``log_z`` is used).
    S, d : float
        Sufficient statistic and dimension.
    """

    def __init__(self, log_prior, S: float, d: float, *, n_fine: int = 200_001, drop: float = 60.0):
        self.S, self.d = float(S), float(d)
        self._log_prior = log_prior
        t = np.linspace(T_MIN, T_MAX, 240_001)
        h = self._h(t)
        lo, hi = np.inf, -np.inf
        for k in MOMENT_POWERS:
            v = h + k * t
            keep = np.flatnonzero(v > np.max(v) - drop)
            lo, hi = min(lo, t[keep[0]]), max(hi, t[keep[-1]])
        step = t[1] - t[0]
        if lo <= T_MIN + 2 * step or hi >= T_MAX - 2 * step:
            raise AssertionError(f"quadrature grid too narrow: mass found at t in [{lo}, {hi}]")
        lo, hi = lo - 10 * step, hi + 10 * step
        self.t = np.linspace(lo, hi, n_fine)
        self.dt = self.t[1] - self.t[0]
        self.h = self._h(self.t)
        self._lse = logsumexp(self.h)
        self.w = np.exp(self.h - self._lse)  # normalised weights on the fine grid
        sd_t = np.sqrt(np.sum(self.w * (self.t - np.sum(self.w * self.t)) ** 2))
        if not self.dt < 0.1 * sd_t:
            raise AssertionError(f"quadrature grid too coarse: dt={self.dt}, sd(log g)={sd_t}")
        self.g = np.exp(self.t)

    def _h(self, t):
        return self._log_prior(np.exp(t)) - 0.5 * self.d * t - 0.5 * self.S * np.exp(-t) + t

    # -------------------------------------------------------------- integrals
    @property
    def log_z(self) -> float:
        """``log int prior(g) g^(-d/2) exp(-S/(2g)) dg``."""
        return float(self._lse + np.log(self.dt))

    def raw_moment(self, k: float) -> float:
        """``E[g^k]`` (any real ``k``, e.g. ``-1`` for ``E[1/g]``)."""
        return float(np.exp(logsumexp(self.h + k * self.t) - self._lse))

    @property
    def mean(self) -> float:
        return float(np.sum(self.w * self.g))

    def central_moment(self, k: int) -> float:
        return float(np.sum(self.w * (self.g - self.mean) ** k))

    @property
    def var(self) -> float:
        return self.central_moment(2)

    @property
    def mu4(self) -> float:
        return self.central_moment(4)

    def log_density(self, g):
        """Normalised log density at ``g``."""
        g = np.asarray(g, dtype=np.float64)
        t = np.log(g)
        return self._h(t) - t - self.log_z

    def cdf(self, x) -> np.ndarray:
        """``P(g <= x)`` by the cumulative trapezoid rule on the log grid."""
        c = np.concatenate([[0.0], np.cumsum(0.5 * (self.w[1:] + self.w[:-1]))])
        c /= c[-1]
        return np.interp(np.log(np.asarray(x, dtype=np.float64)), self.t, c)

    def quantile(self, p) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(0.5 * (self.w[1:] + self.w[:-1]))])
        c /= c[-1]
        return np.exp(np.interp(np.asarray(p, dtype=np.float64), c, self.t))


def assert_draws_match(
    draws,
    post: LogScalePosterior,
    *,
    n_se: float = 5.0,
    label: str = "",
    check_var: bool = True,
    probs=(0.01, 0.1, 0.5, 0.9, 0.99),
) -> None:
    """Compare Monte Carlo draws with the quadrature reference: mean, variance and CDF
    values, each within ``n_se`` Monte Carlo standard errors.

    MCSE: mean ``sqrt(var/n)``; variance ``sqrt((mu4 - var^2)/n)``; CDF value ``F`` at a
    fixed point ``sqrt(F(1-F)/n)`` (binomial).
    """
    x = np.asarray(draws, dtype=np.float64).ravel()
    n = x.size
    assert np.all(np.isfinite(x)) and np.all(x > 0), f"{label}: non-finite or non-positive draws"
    mean, var, mu4 = post.mean, post.var, post.mu4
    se_mean = np.sqrt(var / n)
    assert abs(x.mean() - mean) < n_se * se_mean, (
        f"{label}: mean {x.mean():.10g} vs exact {mean:.10g} ({(x.mean() - mean) / se_mean:+.2f} MCSE)"
    )
    if check_var:
        se_var = np.sqrt((mu4 - var**2) / n)
        v = x.var()
        assert abs(v - var) < n_se * se_var, (
            f"{label}: variance {v:.10g} vs exact {var:.10g} ({(v - var) / se_var:+.2f} MCSE)"
        )
    for p in probs:
        q = post.quantile(p)
        F = float(post.cdf(q))
        emp = np.mean(x <= q)
        se = np.sqrt(F * (1 - F) / n)
        assert abs(emp - F) < n_se * se, (
            f"{label}: P(g <= {q:.6g}) = {emp:.6f} vs exact {F:.6f} ({(emp - F) / se:+.2f} MCSE)"
        )
