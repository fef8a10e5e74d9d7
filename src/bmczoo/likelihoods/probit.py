"""Binary and ordinal observations by data augmentation (Albert & Chib 1993).

``Y_k`` is a level of ``L`` ordered levels, observed through a latent Gaussian:

    z_k ~ N(theta_k, 1),     Y_k = level l  <=>  c_{l-1} < z_k <= c_l,

with cut points ``c_0 = -inf < c_1 < ... < c_{L-1} < c_L = +inf``.  Given ``z`` every
block of the zoo is the Gaussian model with ``tau = 1`` and ``z`` in place of the ratings,
so the priors, biases and the hot path apply unchanged; the sampler adds one block,
``z_k | theta_k, c, Y_k``: ``N(theta_k, 1)`` truncated to the level's interval
(:mod:`bmczoo.likelihoods.truncnorm`), and, for learned cut points, a Metropolis-Hastings
move of ``c`` with ``z`` integrated out (then ``z`` drawn given the new ``c``: together an
exact block update of ``(c, z)``).

* :class:`Probit`: two levels {0, 1} and one fixed cut point ``c_1 = threshold``;
  ``P(Y = 1 | theta) = Phi(theta - threshold)``.  ``threshold=None`` (the default) is read
  from the data at fit time like the Gaussian models' centring: ``-Phi^{-1}(mean Y)`` when
  the fit centres (``bmc.fit(center=True)``, the default), else 0.
* :class:`OrderedProbit`: ``L`` levels (read from the data when ``levels=None``) and
  learned cut points with the prior ``c = ordered(u)``, ``u_l ~ N(0, cut_scale^2)``
  i.i.d. (``c_1 = u_1``, ``c_l = c_{l-1} + exp(u_l)``; NumPyro's ``OrderedTransform``).

A likelihood instance is *bound* to the data by :meth:`bind` (levels and threshold fixed);
:func:`bmczoo.fit` does that.  The cut points live in the Gibbs state as ``cuts`` (C, L-1).
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import ndtr

from .._checks import check_real
from . import truncnorm
from .base import Likelihood

__all__ = ["Probit", "OrderedProbit", "LatentLikelihood", "level_log_probs"]


def level_log_probs(theta, cuts):
    """``log P(Y = l | theta, c)`` for every level: theta (...,), cuts (..., L-1) broadcast
    against theta's leading axes -> (..., L), ``log(Phi(c_l - theta) - Phi(c_{l-1} -
    theta))`` computed stably in both tails."""
    theta = jnp.asarray(theta)
    cuts = jnp.asarray(cuts, theta.dtype)
    d = cuts - theta[..., None]  # (..., L-1)
    # the end levels are one-sided: log Phi(c_1 - theta) and log Phi(theta - c_{L-1}), with
    # no infinite bound (whose gradient would be NaN)
    first, last = truncnorm._log_ndtr(d[..., :1]), truncnorm._log_ndtr(-d[..., -1:])
    middle = truncnorm.log_mass(d[..., :-1], d[..., 1:])
    return jnp.concatenate([first, middle, last], axis=-1)


@dataclasses.dataclass(frozen=True)
class LatentLikelihood(Likelihood):
    """Base of the latent-Gaussian likelihoods (probit, ordered probit): ``tau = 1``,
    values are levels, the Gibbs sampler draws the latent ``z`` each sweep."""

    latent: ClassVar[bool] = True

    def precision(self, n: int) -> float:
        return 1.0

    # -------------------------------------------------------------- levels
    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` fixed the levels (and threshold)."""
        return self.level_values is not None

    @property
    def level_values(self) -> tuple[float, ...] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def num_levels(self) -> int:
        return len(self._require_bound())

    def _require_bound(self) -> tuple[float, ...]:
        if self.level_values is None:
            raise ValueError(
                f"{type(self).__name__} is not bound to data yet: bmc.fit binds it "
                "(or call likelihood.bind(train))"
            )
        return self.level_values

    def level_index(self, values) -> np.ndarray:
        """(n,) int32 index of each value among the levels (host side); a value that is not
        a level is a ``ValueError`` naming it and its position."""
        levels = np.asarray(self._require_bound(), np.float64)
        v = np.asarray(values, np.float64)
        idx = np.clip(np.searchsorted(levels, v), 0, len(levels) - 1)
        bad = np.flatnonzero(levels[idx] != v)
        if bad.size:
            raise ValueError(
                f"{type(self).__name__}: value {float(v[bad[0]])!r} at position {int(bad[0])} is not one of "
                f"the levels {tuple(float(x) for x in levels)}"
            )
        return idx.astype(np.int32)

    def level_index_traced(self, values):
        """:meth:`level_index` inside traced code (no check: the values were checked when
        the model's data were bound)."""
        levels = jnp.asarray(self._require_bound(), jnp.asarray(values).dtype)
        return jnp.clip(jnp.searchsorted(levels, values), 0, levels.shape[0] - 1).astype(jnp.int32)

    def expected_value(self, probs):
        """``sum_l level_l P(Y = l)``: probs (..., L) -> (...)."""
        levels = (
            jnp.asarray(self._require_bound(), probs.dtype)
            if isinstance(probs, jax.Array)
            else np.asarray(self._require_bound(), np.float64)
        )
        return probs @ levels

    # -------------------------------------------------------------- cut points
    def fixed_cuts(self) -> tuple[float, ...] | None:
        """The cut points when they are not learned (probit), else None."""
        return None

    def init_cuts(self, level_index: np.ndarray) -> np.ndarray:
        """Starting cut points (L-1,): ``Phi^{-1}`` of the empirical cumulative fractions."""
        fixed = self.fixed_cuts()
        if fixed is not None:
            return np.asarray(fixed, np.float64)
        L = self.num_levels
        counts = np.bincount(level_index, minlength=L).astype(np.float64)
        F = np.cumsum(counts)[:-1] / counts.sum()
        F = np.clip(F, 0.5 / counts.sum(), 1.0 - 0.5 / counts.sum())
        c = np.asarray([NormalInv(f) for f in F])
        return np.maximum.accumulate(c + 1e-3 * np.arange(L - 1))  # strictly increasing

    def cut_step(self, level_index: np.ndarray) -> np.ndarray:
        """Random-walk scale of each cut point (L-1,), from the data only (so the move is
        a fixed kernel): ``2.4 / sqrt(L-1)`` times the asymptotic sd of the
        ``Phi^{-1}`` of a cumulative fraction of ``n`` ratings."""
        L = self.num_levels
        n = max(int(level_index.size), 1)
        counts = np.bincount(level_index, minlength=L).astype(np.float64)
        F = np.clip(np.cumsum(counts)[:-1] / n, 0.5 / n, 1.0 - 0.5 / n)
        phi = np.exp(-0.5 * np.asarray([NormalInv(f) for f in F]) ** 2) / math.sqrt(2 * math.pi)
        sd = np.sqrt(F * (1 - F) / n) / phi
        return 2.4 / math.sqrt(max(L - 1, 1)) * np.maximum(sd, 1e-3)

    def cut_log_prior(self, cuts):  # pragma: no cover - learned cuts only
        raise NotImplementedError

    # -------------------------------------------------------------- Gibbs
    def gibbs_latent(self, keys, theta, level, cuts, cut_step):
        """The latent block of ``C`` chains: ``(cuts, z)`` given ``theta`` (C, n) at the
        ratings, the level index (n,), the current cut points (C, L-1) and one key per chain
        (C,).  Learned cut points move first (random-walk MH on the ``z``-marginal
        likelihood, see :meth:`cut_move`), then ``z`` is drawn exactly from its truncated
        normal on :meth:`latent_interval`.  The uniforms come from each chain's key; the
        truncated-normal inversion runs on all chains at once, outside ``vmap`` (under
        ``vmap`` its ``lax.cond`` between a tail buffer and a full log-space pass would run
        both branches)."""
        n = theta.shape[-1]
        dt = theta.dtype
        split = jax.vmap(jax.random.split)(keys)
        if self.fixed_cuts() is None:
            cuts = jax.vmap(lambda k, t, c: self.cut_move(k, t, level, c, cut_step))(
                split[:, 0], theta, cuts
            )
        lo, hi = jax.vmap(lambda c: self.latent_interval(c, level, dt))(cuts)
        u = jax.vmap(lambda k: truncnorm.uniform(k, (n,), dt))(split[:, 1])
        return cuts, truncnorm.sample_uniform(u, theta, lo, hi)

    def latent_interval(self, cuts, level, dtype):
        """``(lo, hi)`` (n,) of each rating's level: ``(c_{y-1}, c_y]`` with ``c_0 = -inf``,
        ``c_L = +inf``, for one chain's cut points (L-1,)."""
        inf = jnp.full((1,), jnp.inf, dtype)
        edges = jnp.concatenate([-inf, cuts.astype(dtype), inf])
        return edges[level], edges[level + 1]

    def cut_move(self, key, theta, level, cuts, cut_step):
        """Random-walk Metropolis-Hastings on the cut points with ``z`` integrated out:
        propose ``c' = c + step * eps`` (all cut points at once), reject unless increasing,
        accept with ``log p(c') - log p(c) + sum_k log P(Y_k | theta_k, c') - log P(Y_k |
        theta_k, c)``."""
        k1, k2 = jax.random.split(key)
        dt = theta.dtype
        prop = cuts + jnp.asarray(cut_step, dt) * jax.random.normal(k1, cuts.shape, dt)
        ordered = jnp.all(jnp.diff(prop) > 0)

        def loglik(c):
            inf = jnp.full((1,), jnp.inf, dt)
            edges = jnp.concatenate([-inf, c, inf])
            return jnp.sum(truncnorm.log_mass(edges[level] - theta, edges[level + 1] - theta))

        safe = jnp.where(ordered, prop, cuts)
        log_alpha = (
            self.cut_log_prior(safe) - self.cut_log_prior(cuts) + loglik(safe) - loglik(cuts)
        )
        accept = ordered & (jnp.log(jax.random.uniform(k2, (), dt)) < log_alpha)
        return jnp.where(accept, prop, cuts)

    # -------------------------------------------------------------- VB
    def vb_params(self, q: dict) -> dict:
        """The fitted cut points (point estimates) of a VB fit, when learned."""
        return {"cuts": q["cuts"]} if "cuts" in q else {}

    # -------------------------------------------------------------- NumPyro
    def sample_obs(self, mean, n, obs, cuts=None):
        """``obs`` (the level values) through ``Categorical(logits=log P(Y = l | theta, c))``."""
        c = jnp.asarray(self.fixed_cuts(), mean.dtype) if cuts is None else cuts
        logits = level_log_probs(mean, jnp.broadcast_to(c, mean.shape + c.shape[-1:]))
        y = None if obs is None else self.level_index_traced(obs)
        return numpyro.sample("obs", dist.Categorical(logits=logits), obs=y)


def NormalInv(p: float) -> float:
    """``Phi^{-1}(p)`` on the host (float64)."""
    return NormalDist().inv_cdf(float(p))


@dataclasses.dataclass(frozen=True)
class Probit(LatentLikelihood):
    """Binary entries (values 0 and 1): ``P(Y = 1 | theta) = Phi(theta - threshold)``,
    the latent ``z ~ N(theta, 1)`` truncated to ``z > threshold`` (Y = 1) or ``z <=
    threshold`` (Y = 0).

    Parameters
    ----------
    threshold : float, optional
        The fixed cut point; None: read from the data when the fit binds the likelihood
        (``-Phi^{-1}(mean Y)`` when centring, the probit analogue of subtracting the mean;
        0 without centring).
    """

    binary: ClassVar[bool] = True

    threshold: float | None = None
    name = "probit"
    cli_help = "0/1 ratings, see --binarize; prints its classification metrics"

    def __post_init__(self):
        if self.threshold is not None:
            object.__setattr__(self, "threshold", check_real("threshold", self.threshold))

    @property
    def level_values(self):
        return None if self.threshold is None else (0.0, 1.0)

    def bind(self, values, center: bool = True) -> "Probit":
        """Checked against the data (every value 0 or 1, both present) and with its
        threshold fixed."""
        v = np.asarray(values, np.float64)
        bad = np.flatnonzero((v != 0.0) & (v != 1.0))
        if bad.size:
            raise ValueError(
                f"Probit needs binary values 0 or 1; value {float(v[bad[0]])!r} at position {int(bad[0])} "
                "is neither (binarise first, e.g. values >= 4)"
            )
        if self.threshold is not None:
            return self
        frac = float(np.mean(v))
        if not 0.0 < frac < 1.0:
            raise ValueError(
                f"Probit: every value is {int(v[0])}: a binary model needs both 0s and 1s"
            )
        thr = -NormalInv(frac) if center else 0.0
        return dataclasses.replace(self, threshold=float(thr))

    def fixed_cuts(self):
        return (self.threshold if self.threshold is not None else 0.0,)

    def sample_obs(self, mean, n, obs, cuts=None):
        """``obs ~ Bernoulli(probs=Phi(theta - threshold))``."""
        thr = self.fixed_cuts()[0]
        return numpyro.sample("obs", dist.Bernoulli(probs=ndtr(mean - thr)), obs=obs)

    def describe(self) -> dict:
        return {"name": self.name, "threshold": self.threshold}


@dataclasses.dataclass(frozen=True)
class OrderedProbit(LatentLikelihood):
    """Ordinal entries (e.g. 1-5 stars, half stars): ``P(Y = l | theta, c) = Phi(c_l -
    theta) - Phi(c_{l-1} - theta)`` with learned cut points.

    Parameters
    ----------
    levels : sequence of numbers, optional
        The ordered levels; None: the distinct values of the data (read when the fit binds
        the likelihood).  A value of the data that is not a level is an error.
    cut_scale : float > 0
        Prior scale of the cut points: ``c = ordered(u)``, ``u_l ~ N(0, cut_scale^2)``.
    """

    levels: tuple | None = None
    cut_scale: float = 2.0
    name = "ordered-probit"
    cli_help = (
        "ordinal levels such as 1-5 stars, learned cut points; prints its classification metrics"
    )

    def __post_init__(self):
        object.__setattr__(
            self, "cut_scale", check_real("cut_scale", self.cut_scale, low=0.0, low_open=True)
        )
        if self.levels is not None:
            try:
                lv = tuple(float(x) for x in self.levels)
            except (TypeError, ValueError):
                raise ValueError(
                    f"levels must be a sequence of numbers, got {self.levels!r}"
                ) from None
            if len(lv) < 2 or not all(np.isfinite(lv)) or any(b <= a for a, b in zip(lv, lv[1:])):
                raise ValueError(
                    f"levels must be at least two finite, strictly increasing numbers, got {self.levels!r}"
                )
            object.__setattr__(self, "levels", lv)

    @property
    def level_values(self):
        return self.levels

    def bind(self, values, center: bool = True) -> "OrderedProbit":
        """With ``levels`` read from the data when None (at least two distinct values), and
        every value checked to be a level."""
        out = self
        if self.levels is None:
            lv = np.unique(np.asarray(values, np.float64))
            if lv.size < 2:
                raise ValueError(
                    "OrderedProbit: the data have a single distinct value; an ordinal model needs two "
                    "or more levels"
                )
            if lv.size > 100:
                raise ValueError(
                    f"OrderedProbit: the data have {lv.size} distinct values; give levels= explicitly "
                    "if they really are ordinal levels"
                )
            out = dataclasses.replace(self, levels=tuple(float(x) for x in lv))
        out.level_index(values)
        return out

    def cut_log_prior(self, cuts):
        """Log density of the cut points (L-1,): ``u = (c_1, log(c_l - c_{l-1}))``, ``u_l ~
        N(0, s^2)``, plus the log Jacobian ``-sum_l log(c_l - c_{l-1})``."""
        s = self.cut_scale
        gaps = jnp.diff(cuts)
        u = jnp.concatenate([cuts[:1], jnp.log(gaps)])
        return jnp.sum(-0.5 * (u / s) ** 2) - jnp.sum(jnp.log(gaps))

    def sample_params(self):
        """NumPyro site ``cuts`` (L-1,): ``OrderedTransform`` of ``N(0, cut_scale^2)``."""
        L = self.num_levels
        base = dist.Normal(0.0, self.cut_scale).expand([L - 1]).to_event(1)
        cuts = numpyro.sample(
            "cuts", dist.TransformedDistribution(base, dist.transforms.OrderedTransform())
        )
        return {"cuts": cuts}

    def describe(self) -> dict:
        return {
            "name": self.name,
            "levels": None if self.levels is None else list(self.levels),
            "cut_scale": self.cut_scale,
        }
