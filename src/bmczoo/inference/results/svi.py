"""A fitted NumPyro autoguide (:class:`SVIFit`) and its one-point special case
(:class:`MAPFit`, which overrides the hooks that say where its draws are and that a
point has no spread)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..._arviz import add_factor_quantities, add_gamma, add_hyper_summaries, theta_singular_values
from .. import saving
from . import arrays, levels
from . import outputs as out
from .base import FitResult, draws_theta_mean
from .fold_in import fold_in_draws
from .loglik import draw_step

__all__ = ["SVIFit", "MAPFit"]


@saving.result_class
@dataclasses.dataclass(repr=False)
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

    def _draw_source(self) -> dict:
        """What the predictive quantities average over: the guide's draws (MAP: its point)."""
        return self.draws

    @property
    def _mean_source(self) -> dict:
        """What the predictive mean is taken from: the guide's point (its medians) when it
        has one, else its draws."""
        return self.draws if self.point is None else self.point

    def _repr_holds(self) -> str:
        S = next((np.shape(v)[0] for v in self.draws.values() if np.ndim(v) >= 1), 0)
        return (
            f"{S} draws from the {self.info.settings.guide!r} guide, {np.size(self.losses)} steps"
        )

    def _predict_mean(self, r, c) -> np.ndarray:
        """``E_q[M_i . N_j]`` (plus ``E_q[row_bias_i + col_bias_j]`` with biases, plus the
        centring offset, clipped) at the given entries."""
        src = self._mean_source
        return self._finish(draws_theta_mean(src, r, c))

    def _theta_moments(self, r, c):
        """Mean as :meth:`predict` (the guide's median, else the draws' mean); variance
        over the guide's draws (Monte Carlo; MAP: 0, a point has no spread)."""
        src = self._mean_source
        return draws_theta_mean(src, r, c), self._theta_var(r, c)

    def _theta_var(self, r, c) -> np.ndarray:
        """The variance of ``theta`` at the entries over the guide's draws."""
        return out.draws_theta_moments(out.flat_draws(self.draws, self.info.K), r, c)[1]

    def noise_var(self) -> float:
        """``E_q[1/tau]`` over the guide's draws of a learned tau (MAP: ``1/tau`` at the
        point), else the fixed ``1/tau``."""
        src = self._draw_source()
        lik = self.info.likelihood
        if lik.learned and "tau" in src:  # times nu / (nu - 2) for Student-t noise
            return float(lik.noise_variance(np.mean(1.0 / np.asarray(src["tau"], np.float64))))
        return 1.0 / float(self.info.tau)

    def log_predictive_density(self, test) -> float:
        """SVI: ``log mean_s N(y | theta_s + offset, 1/tau_s)`` over the guide's draws; MAP:
        ``log N(y | theta + offset, 1/tau)`` at the point (no parameter uncertainty).
        Unclipped.

        Parameters
        ----------
        test : RatingData
            Held-out ratings of the fit's shape.
        """
        test = self._check_test(test)
        if self.info.likelihood.latent:
            return self._level_lpd(test)
        src = self._draw_source()
        d = out.flat_draws(src, self.info.K)
        return float(
            np.mean(
                out.draws_lpd(
                    d,
                    test.rows,
                    test.cols,
                    test.values,
                    self.info.shift.offset,
                    self.info.tau,
                    self.info.likelihood,
                )
            )
        )

    def _level_proba(self, r, c) -> np.ndarray:
        """Level probabilities averaged over the guide's draws (MAP: at the point)."""
        src = self._draw_source()
        d = out.flat_draws(src, self.info.K)
        cuts_src = src if "cuts" in src else self.draws
        return levels.draws_level_proba(
            out.draw_blocks(d, r, c), self._cut_draws(cuts_src, d["M"].shape[0])
        )

    def _user_scores(self, users, by, z, rng):
        d = out.flat_draws(self._draw_source(), self.info.K)
        mean_src = None if self.point is None else out.flat_draws(self.point, self.info.K)
        return out.draws_user_scores(d, mean_src, users, by, z, self.noise_var(), rng)

    def _fold_in(self, new):
        src = self._draw_source()
        return fold_in_draws(self, new, out.flat_draws(src, self.info.K), src)

    # ------------------------------------------------------------------ arrays (hooks)
    def _posterior_arrays(self, entries, num_draws: int, seed: int) -> arrays.Posterior:
        """The guide's draws as one chain: gamma, theta at the entries, the factor
        quantities and the hyper-parameters' summaries; the loss trace."""
        rows, cols = arrays.resolve_entries(self, entries, seed)
        coords: dict = {}
        post, stats, conv = _svi_arrays(self, (rows, cols), coords)
        attrs = {"representation": "draws from the fitted guide, one chain"}
        return arrays.Posterior(post, stats, conv, attrs, coords, rows, cols)

    def _tau_draws(self, num_draws: int, seed: int):
        src = self.draws if "tau" in (self.draws or {}) else (self.point or {})
        return None if src.get("tau") is None else np.reshape(src["tau"], (1, -1))

    def _extra_draws(self, post: dict) -> dict:
        """Every guide draw that is not in the default posterior, as one chain."""
        S = next(iter(post.values())).shape[1]
        return {
            k: np.asarray(v)[None]
            for k, v in (self.draws or {}).items()
            if k not in post and np.ndim(v) >= 1 and np.shape(v)[0] == S
        }

    def _ratings_theta_tau(self, rows, cols, num_draws: int, max_draws: int, rng):
        return _svi_theta_tau(self, rows, cols, max_draws)

    def _drawn_cuts(self, lik, shape, step: int) -> np.ndarray:
        src = self.draws if "cuts" in (self.draws or {}) else self.point
        return np.asarray(src["cuts"], np.float64).reshape(1, -1, lik.num_levels - 1)[:, ::step]

    def _gamma_draws(self):
        return self.draws.get("gamma")

    def _prob_gamma_above(self, threshold: float) -> np.ndarray:
        try:
            return arrays.draws_prob_above(self, self.draws, threshold)
        except ValueError as e:
            raise ValueError(
                f"{e} (a MAP fit, or a guide that integrates gamma out, keeps no draws of it)"
            ) from None


@saving.result_class
@dataclasses.dataclass(repr=False)
class MAPFit(SVIFit):
    """Result of ``bmc.fit(..., method="map")``: ``AutoDelta`` (one point, gamma integrated out).

    Its predictive variance is the noise's alone: ``Var[theta_ij] = 0`` at a point."""

    def _draw_source(self) -> dict:
        return self._mean_source

    def _repr_holds(self) -> str:
        return f"a point, {np.size(self.losses)} steps"

    def _theta_var(self, r, c) -> np.ndarray:
        return np.zeros(len(r))


# --------------------------------------------------------------------------- arrays for ArviZ
def _svi_arrays(fit, entries, coords):
    d = fit.draws
    post: dict[str, np.ndarray] = {}
    if "gamma" in d:
        add_gamma(post, np.asarray(d["gamma"])[None])
    rows, cols = entries
    if "M" in d and "N" in d:
        M, N = np.asarray(d["M"]), np.asarray(d["N"])
        if rows.size:
            post["theta"] = np.sum(M[:, rows] * N[:, cols], axis=-1)[None]
        add_factor_quantities(post, theta_singular_values(M, N)[None])
    if post:
        add_hyper_summaries(
            post,
            {k: np.asarray(v)[None] for k, v in d.items()},
            next(iter(post.values())).shape[:2],
            coords,
        )
    conv = {"loss": np.asarray(getattr(fit, "losses", np.zeros(0)), np.float64)[None]}
    if not conv["loss"].size:
        conv = {}
    return post, {}, conv


def _svi_theta_tau(fit, rows, cols, max_draws):
    src = fit.draws if fit.draws and "M" in fit.draws else (fit.point or {})
    if "M" not in src:
        raise ValueError("the fit holds no draws of the factors M, N")
    K = np.shape(src["M"])[-1]
    d = out.flat_draws(src, K)
    S = d["M"].shape[0]
    step = draw_step(1, S, max_draws)
    d = {k: (None if v is None else v[::step]) for k, v in d.items()}
    theta = np.empty((d["M"].shape[0], rows.size))
    for p0, p1, t in out.draw_blocks(d, rows, cols):
        theta[:, p0:p1] = t
    tau = None
    if d["tau"] is not None and fit.info.likelihood.learned:
        tau = d["tau"][None]
    return (
        theta[None],
        tau,
        {"draw_step": step, "theta_source": "draws from the fitted guide (one chain)"},
    )
