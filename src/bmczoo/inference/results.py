"""Fit results: one class per method family, plain arrays behind one typed interface.

Every result carries a typed :class:`FitInfo` (the model's components, the settings
object it was run with, the map from ``theta`` to predictions) and gives:

* ``predict(rows, cols)``: posterior mean on the data's scale, ``rmse(test)``,
  ``rmse_theta(theta)`` (RMSE against a full true matrix, computed in blocks);
* the plain arrays of its family: draws with leading (chain, draw) axes (:class:`MCMCFit`:
  ``samples``; :class:`SVIFit`: ``draws``), or the moments of the variational posterior
  (:class:`VBFit`);
* ``family`` (``"mcmc"``, ``"vb"``, ``"svi"``): which of those it holds; diagnostics
  convert these arrays to ArviZ at the edge (:mod:`bmczoo.diagnostics.convert`).

``fit.meta`` is a read-only dict view of the same information, kept for code written
against earlier versions.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, ClassVar

import numpy as np

from .._checks import check_ratings
from ..data.ratings import check_entries
from ..likelihoods import Likelihood
from ..offsets import Shift
from ..priors import Prior
from .settings import Settings

__all__ = ["FitInfo", "FitResult", "MCMCFit", "GibbsFit", "NUTSFit", "VBFit", "SVIFit", "MAPFit", "theta_mean",
           "bias_draws", "draws_theta_mean"]


def theta_mean(M, N, rows, cols, budget: int = 2**24) -> np.ndarray:
    """Mean over draws of ``M_i . N_j``: M (..., m1, K), N (..., m2, K) -> (P,).

    Blocks over draws and entries keep the temporaries below ``budget`` numbers (128 MB).
    """
    M = np.asarray(M).reshape(-1, *np.shape(M)[-2:])
    N = np.asarray(N).reshape(-1, *np.shape(N)[-2:])
    S, _, K = M.shape
    rows, cols = np.asarray(rows), np.asarray(cols)
    out = np.zeros(len(rows))
    draws = max(1, min(S, budget // (K * 1024)))
    chunk = max(1024, budget // (draws * K))
    for s0 in range(0, S, draws):
        Ms, Ns = M[s0 : s0 + draws], N[s0 : s0 + draws]
        for p0 in range(0, len(rows), chunk):
            r, c = rows[p0 : p0 + chunk], cols[p0 : p0 + chunk]
            out[p0 : p0 + chunk] += np.einsum("spk,spk->p", Ms[:, r], Ns[:, c], dtype=np.float64)
    return out / S


def bias_draws(src: dict, rows, cols):
    """``row_bias_i + col_bias_j`` at the entries for each draw (..., P) when ``src`` (draws
    or a point) has the biases' sites, else ``0.0``."""
    if "row_bias" not in src:
        return 0.0
    rows, cols = np.asarray(rows), np.asarray(cols)
    return np.asarray(src["row_bias"], np.float64)[..., rows] + np.asarray(src["col_bias"], np.float64)[..., cols]


def draws_theta_mean(src: dict, rows, cols) -> np.ndarray:
    """Mean over the draws (or the point) in ``src`` of ``theta_ij = M_i . N_j`` plus, when
    ``src`` has them, ``row_bias_i + col_bias_j`` (P,)."""
    out = theta_mean(src["M"], src["N"], rows, cols)
    if "row_bias" in src:
        rb = np.asarray(src["row_bias"], np.float64)
        cb = np.asarray(src["col_bias"], np.float64)
        out = out + rb.reshape(-1, rb.shape[-1]).mean(0)[np.asarray(rows)] \
            + cb.reshape(-1, cb.shape[-1]).mean(0)[np.asarray(cols)]
    return out


@dataclasses.dataclass(frozen=True)
class FitInfo:
    """What every fit records about its model and run (typed; no dict between modules).

    Attributes
    ----------
    method : "gibbs", "vb", "svi", "nuts" or "map".
    prior, likelihood : the model's components.
    K : latent dimension.  shape : (m1, m2).
    shift : the map from ``theta`` to predictions (centring offset, clipping).
    center : whether the data were centred.  seed : the PRNG seed.  dtype : float dtype name.
    settings : the :mod:`~bmczoo.inference.settings` object the fit ran with.
    tau : the likelihood precision of the factor blocks (the starting value when the
        likelihood learns it).
    biases : the :class:`~bmczoo.offsets.Biases` component, or None (no biases).
    """

    method: str
    prior: Prior
    likelihood: Likelihood
    K: int
    shape: tuple[int, int]
    shift: Shift
    center: bool
    seed: int
    dtype: str
    settings: Settings
    tau: float
    biases: Any = None

    def as_dict(self) -> dict[str, Any]:
        lik = self.likelihood.describe()
        return {
            "method": self.method, "prior": self.prior, "prior_name": self.prior.name,
            "hyperparameters": self.prior.hyperparameters(), "K": self.K, "lam": lik.get("lam"),
            "noise_sd": lik.get("noise_sd"), "likelihood": lik, "tau": self.tau, "center": self.center,
            "biases": None if self.biases is None else self.biases.describe(),
            "offset": self.shift.offset, "clip": self.shift.clip, "seed": self.seed, "dtype": self.dtype,
            **self.settings.as_dict(),
        }


@dataclasses.dataclass
class FitResult:
    """Base of the result classes: predictions and their RMSE, diagnostics delegation."""

    info: FitInfo
    family: ClassVar[str] = ""

    # ------------------------------------------------------------------ info
    @property
    def shape(self) -> tuple[int, int]:
        return self.info.shape

    @property
    def method(self) -> str:
        return self.info.method

    @property
    def prior(self) -> Prior:
        return self.info.prior

    def run_stats(self) -> dict[str, Any]:
        """Per-run figures of the family (number of draws kept, iterations, ...)."""
        return {}

    @property
    def meta(self) -> types.MappingProxyType:
        """Read-only dict view of :attr:`info` and :meth:`run_stats`."""
        return types.MappingProxyType({**self.info.as_dict(), **self.run_stats()})

    # ------------------------------------------------------------------ predictions
    def _finish(self, theta) -> np.ndarray:
        return self.info.shift.apply(np.asarray(theta, np.float64))

    def _check_entries(self, rows, cols):
        return check_entries(rows, cols, self.shape, "predict")

    def predict(self, rows, cols) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def rmse(self, test) -> float:
        """RMSE of :meth:`predict` against the values of ``test`` (a RatingData)."""
        test = check_ratings(test, "test")
        if test.shape != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        pred = self.predict(test.rows, test.cols)
        return float(np.sqrt(np.mean((pred - test.values) ** 2)))

    def rmse_theta(self, theta, *, block_rows: int | None = None) -> float:
        """RMSE of the posterior mean against a full ``m1 x m2`` matrix ``theta`` over all
        its entries (the paper's simulation criterion), predicted a block of rows at a time."""
        theta = np.asarray(theta, np.float64)
        if theta.shape != tuple(self.shape):
            raise ValueError(f"theta has shape {theta.shape}, the fit has {self.shape}")
        m1, m2 = self.shape
        step = block_rows or max(1, 2**20 // m2)
        sse = 0.0
        for r0 in range(0, m1, step):
            r1 = min(m1, r0 + step)
            rows, cols = np.divmod(np.arange(r0 * m2, r1 * m2), m2)
            sse += float(np.sum((self.predict(rows, cols) - theta[r0:r1].ravel()) ** 2))
        return float(np.sqrt(sse / (m1 * m2)))

    # ------------------------------------------------------------------ diagnostics
    def rank_posterior(self, threshold: float) -> np.ndarray:
        """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K; see
        :func:`bmczoo.diagnostics.rank_posterior`."""
        from .. import diagnostics

        return diagnostics.rank_posterior(self, threshold)

    def to_arviz(self, **kwargs):
        """ArviZ data (posterior of gamma, sorted gamma, tracked theta entries, invariant
        summaries, per-iteration traces); see :func:`bmczoo.diagnostics.to_arviz`."""
        from .. import diagnostics

        return diagnostics.to_arviz(self, **kwargs)


def _entry_keys(rows, cols, m2: int) -> np.ndarray:
    return np.asarray(rows, np.int64) * m2 + np.asarray(cols, np.int64)


@dataclasses.dataclass
class MCMCFit(FitResult):
    """Draws of an MCMC run (Gibbs or NUTS).

    Attributes
    ----------
    samples : dict of arrays with leading axes (chain, draw): ``gamma`` (K,), ``theta``
        at the tracked entries, and ``M``, ``N`` when factor draws were stored.
    pred_rows, pred_cols, pred_mean : the entries whose posterior mean was computed at
        fit time and that mean (data scale, clipped), averaged over chains.
    rmse_draw, rmse_mean : (chain, iteration) test RMSE of each draw and of the running
        posterior mean (empty without test data).
    track_rows, track_cols : the tracked entries.
    num_kept : draws kept per chain.
    mcmc : NumPyro's ``MCMC`` object when it drove the run (else None).
    """

    samples: dict = dataclasses.field(default_factory=dict)
    pred_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    pred_cols: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    pred_mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    rmse_draw: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((1, 0)))
    rmse_mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((1, 0)))
    track_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    track_cols: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    num_kept: int = 0
    mcmc: Any = None
    family: ClassVar[str] = "mcmc"

    def run_stats(self):
        return {"num_kept": self.num_kept}

    def predict(self, rows, cols) -> np.ndarray:
        """Posterior mean of ``theta`` at the given entries (1-D array, data scale).

        Entries requested at fit time (``predict=`` or the test set) come from the running
        sums; other entries need the stored factor draws (``store_factors``).
        """
        r, c = self._check_entries(rows, cols)
        keys = _entry_keys(r, c, self.shape[1])
        known = _entry_keys(self.pred_rows, self.pred_cols, self.shape[1])
        if keys.size <= known.size and np.array_equal(keys, known[: keys.size]):
            return self.pred_mean[: keys.size]  # e.g. fit.rmse(test) with the test set of the fit
        order = np.argsort(known, kind="stable")
        # searchsorted on the sorted copy: with sorter= it is ~20x slower on millions of keys
        known_sorted = known[order]
        pos = np.searchsorted(known_sorted, keys) if known.size else np.zeros(keys.shape, int)
        pos = np.minimum(pos, max(known.size - 1, 0))
        if known.size > 0 and np.all(known_sorted[pos] == keys):
            return self.pred_mean[order[pos]]
        if "M" not in self.samples:
            raise ValueError(
                "these entries were not requested at fit time and no factor draws were stored: "
                "pass them as fit(..., predict=(rows, cols)) or use store_factors=True"
            )
        return self._finish(draws_theta_mean(self.samples, r, c))


@dataclasses.dataclass
class GibbsFit(MCMCFit):
    """Result of ``bmc.fit(..., method="gibbs")``: draws of the conjugate Gibbs sampler."""


@dataclasses.dataclass
class NUTSFit(MCMCFit):
    """Result of ``bmc.fit(..., method="nuts")``: draws of NumPyro's NUTS."""


@dataclasses.dataclass
class VBFit(FitResult):
    """Result of ``bmc.fit(..., method="vb")``: the mean-field variational posterior.

    Attributes
    ----------
    m, n : (m1, K), (m2, K) means of ``q(M_i)`` and ``q(N_j)``.
    V_diag, W_diag : (m1, K), (m2, K) diagonals of their covariances.
    q_gamma : parameters of ``q(gamma_h)`` (the prior's ``vb_update`` params) and ``inv_mean``;
        for a prior without column scales (Normal-Wishart) an empty mapping whose items
        raise ``ValueError`` saying so.
    q_prior : parameters of the q of the prior's variables (:meth:`Prior.vb_params`):
        ``q_gamma`` for the column-scale priors; Normal-Wishart: ``mu_F, beta_F, nu_F,
        W_F, E_Lambda_F`` of ``q(mu_F, Lambda_F) = NW(mu, beta, W, nu)``, F = M, N.
    q_noise : ``q(tau)`` of a learned likelihood (``shape, rate, mean, inv_mean``), else {}.
    q_biases, row_bias, col_bias : the biases' q (``b_mean, b_var, c_mean, c_var`` and
        the inverse-gamma ``sb_shape, sb_rate, sc_shape, sc_rate``) and the means
        ``E[b_i]``, ``E[c_j]`` ({} and None without biases).
    elbo, rmse_trace : per-iteration ELBO and test RMSE (empty without test data).
    converged : whether the relative-ELBO tolerance was reached before ``max_iter``.
    state : the full :class:`~bmczoo.inference.vb.VBState` of the kept run (covariances).
    num_iter, best_run, iteration_seconds, final_elbo_per_run : run figures.
    """

    m: np.ndarray = None
    n: np.ndarray = None
    V_diag: np.ndarray = None
    W_diag: np.ndarray = None
    q_gamma: dict = dataclasses.field(default_factory=dict)
    q_prior: dict = dataclasses.field(default_factory=dict)
    q_noise: dict = dataclasses.field(default_factory=dict)
    q_biases: dict = dataclasses.field(default_factory=dict)
    row_bias: np.ndarray | None = None
    col_bias: np.ndarray | None = None
    elbo: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    rmse_trace: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    converged: bool = False
    state: Any = None
    num_iter: int = 0
    best_run: int = 0
    iteration_seconds: tuple = ()
    final_elbo_per_run: tuple = ()
    family: ClassVar[str] = "vb"

    def run_stats(self):
        return {"num_iter": self.num_iter, "num_runs": self.info.settings.restarts, "best_run": self.best_run,
                "iteration_seconds": list(self.iteration_seconds),
                "final_elbo_per_run": list(self.final_elbo_per_run)}

    def predict(self, rows, cols) -> np.ndarray:
        """``m_i . n_j`` (plus ``E[b_i] + E[c_j]`` with biases, plus the centring offset,
        clipped) at the given entries."""
        r, c = self._check_entries(rows, cols)
        theta = theta_mean(self.m, self.n, r, c)
        if self.row_bias is not None:
            theta = theta + np.asarray(self.row_bias, np.float64)[r] + np.asarray(self.col_bias, np.float64)[c]
        return self._finish(theta)


class _NoGamma(dict):
    """``VBFit.q_gamma`` of a prior without column scales: empty, and any item access
    raises ``ValueError`` naming the prior and where its q parameters are."""

    def __init__(self, prior_name: str):
        super().__init__()
        self.prior_name = prior_name

    def __missing__(self, key):
        raise ValueError(f"the {self.prior_name} prior has no column scales gamma_h, so q(gamma) has no "
                         f"{key!r}; its variational parameters are in VBFit.q_prior")


def no_gamma(prior) -> dict:
    """The ``q_gamma`` of a VB fit whose prior has no column scales."""
    return _NoGamma(prior.name)


@dataclasses.dataclass
class SVIFit(FitResult):
    """Result of ``bmc.fit(..., method="svi")``: a fitted NumPyro autoguide.

    Attributes
    ----------
    draws : dict of samples of the latent sites from the guide (one for MAP).
    point : the guide's medians of ``M``, ``N`` (AutoNormal, AutoDelta) used to predict,
        or None (predictions average over ``draws``).
    losses : per-step loss (negative ELBO; for MAP the negative log joint).
    guide : the NumPyro autoguide.
    """

    draws: dict = dataclasses.field(default_factory=dict)
    point: dict | None = None
    losses: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    guide: Any = None
    family: ClassVar[str] = "svi"

    def predict(self, rows, cols) -> np.ndarray:
        """``E_q[M_i . N_j]`` (plus ``E_q[row_bias_i + col_bias_j]`` with biases, plus the
        centring offset, clipped) at the given entries."""
        r, c = self._check_entries(rows, cols)
        src = self.point if self.point is not None else self.draws
        return self._finish(draws_theta_mean(src, r, c))


@dataclasses.dataclass
class MAPFit(SVIFit):
    """Result of ``bmc.fit(..., method="map")``: ``AutoDelta`` (one point, gamma integrated out)."""
