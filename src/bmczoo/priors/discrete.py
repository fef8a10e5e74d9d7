"""Discrete spike-and-slab prior: ``gamma_h ~ (1-p) delta_eps + p delta_C``."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from .base import Prior, VBGamma, check_positive, set_fields


def _slab_logit(S, m: int, p: float, C: float, eps: float):
    """``log P(C | S) - log P(eps | S)`` for ``m`` iid N(0, gamma) entries with sum of squares S.

    ``l1 - l0 = logit(p) - (m/2) log(C/eps) - (S/2)(1/C - 1/eps)``, computed as one
    difference so that nothing overflows even for m ~ 10^5.
    """
    return (
        math.log(p) - math.log1p(-p) - 0.5 * m * math.log(C / eps) + 0.5 * S * (1.0 / eps - 1.0 / C)
    )


class ColumnSpikeSlabNormal(dist.Distribution):
    """Exact marginal of an ``m x K`` matrix whose column ``h`` is N(0, gamma_h I) with
    ``gamma_h = C`` with probability ``slab_prob[h]`` and ``eps`` otherwise.

    The discrete prior is integrated out exactly, so NUTS and SVI see only continuous
    sites (no enumeration and no ``funsor`` needed).  The mixing weights may be given as
    ``slab_logit`` instead (kept internally as logits: saturated probabilities would give
    ``log(0)`` and NaN gradients).
    """

    arg_constraints = {"slab_logit": constraints.real}
    support = constraints.independent(constraints.real, 2)
    pytree_data_fields = ("slab_logit",)
    pytree_aux_fields = ("m", "C", "eps")

    def __init__(
        self,
        m: int,
        slab_prob=None,
        C: float = 1.0,
        eps: float = 0.05,
        *,
        slab_logit=None,
        validate_args=None,
    ):
        if (slab_prob is None) == (slab_logit is None):
            raise ValueError("give exactly one of slab_prob and slab_logit")
        self.m, self.C, self.eps = int(m), float(C), float(eps)
        if slab_logit is None:
            p = jnp.asarray(slab_prob)
            slab_logit = jnp.log(p) - jnp.log1p(-p)
        self.slab_logit = jnp.asarray(slab_logit)
        K = self.slab_logit.shape[-1]
        super().__init__(
            batch_shape=self.slab_logit.shape[:-1],
            event_shape=(self.m, K),
            validate_args=validate_args,
        )

    @property
    def slab_prob(self):
        return jax.nn.sigmoid(self.slab_logit)

    def sample(self, key, sample_shape=()):
        k1, k2 = jax.random.split(key)
        shape = sample_shape + self.batch_shape + self.event_shape
        z = jax.random.bernoulli(k1, self.slab_prob, sample_shape + self.slab_logit.shape)
        var = jnp.where(z, self.C, self.eps)
        return jax.random.normal(k2, shape) * jnp.sqrt(var)[..., None, :]

    def log_prob(self, value):
        S = jnp.sum(value**2, axis=-2)
        log_norm = -0.5 * self.m * math.log(2.0 * math.pi)
        l1 = (
            jax.nn.log_sigmoid(self.slab_logit)
            - 0.5 * self.m * math.log(self.C)
            - S / (2.0 * self.C)
        )
        l0 = (
            jax.nn.log_sigmoid(-self.slab_logit)
            - 0.5 * self.m * math.log(self.eps)
            - S / (2.0 * self.eps)
        )
        return jnp.sum(jnp.logaddexp(l1, l0) + log_norm, axis=-1)


@dataclasses.dataclass(frozen=True)
class Discrete(Prior):
    """Spike and slab on the column scales: ``gamma_h = C`` w.p. ``p``, else ``eps``.

    Conditional: ``P(gamma_h = C | S_h) = sigmoid(l1 - l0)`` with
    ``l1 = log p - (d/2) log C - S_h/(2C)`` and ``l0 = log(1-p) - (d/2) log eps - S_h/(2 eps)``,
    computed in log space (with d ~ 10^4 the raw weights overflow).

    In the NumPyro model the discrete variable is integrated out exactly:
    ``M ~ ColumnSpikeSlabNormal(p)`` and ``N | M ~ ColumnSpikeSlabNormal(P(C | M))``.
    The sites ``"gamma_slab_prob"`` (``P(gamma_h = C | M, N)``) and ``"gamma"``
    (``E[gamma_h | M, N]``, Rao-Blackwellised) are deterministic.

    Parameters
    ----------
    C : float > 0
        Slab variance.
    p : float in (0, 1)
        Prior probability of the slab.
    eps : float in (0, C)
        Spike variance.
    """

    C: float = 1.0
    p: float = 0.05
    eps: float = 0.05
    name = "discrete"
    cli_defaults = {"C": 1.0, "p": 0.05, "eps": 0.07}  # the paper's MovieLens values (Table 6)
    tuned = "eps"
    # the flips every fourth sweep keep the rank mixing (benchmarks/bench_rank_mixing.py) at
    # a fraction of their cost: their reflections, not the sparse products, dominate a sweep
    column_moves_every = 4

    def __post_init__(self):
        set_fields(self, check_positive("Discrete", C=self.C, p=self.p, eps=self.eps))
        if not self.p < 1.0:
            raise ValueError(f"Discrete: p must be in (0, 1), got {self.p!r}")
        if not self.eps < self.C:
            raise ValueError(f"Discrete: need 0 < eps < C, got eps={self.eps!r}, C={self.C!r}")

    def slab_logit(self, S, d: int):
        """``log P(gamma_h = C | S_h) - log P(gamma_h = eps | S_h)``."""
        return _slab_logit(S, d, self.p, self.C, self.eps)

    def sample_gamma(self, K, d):
        z = numpyro.sample("gamma_slab", dist.Bernoulli(self.p).expand([K]).to_event(1))
        return numpyro.deterministic("gamma", jnp.where(z > 0, self.C, self.eps))

    def sample_latents(self, m1, m2, K):
        prior = jnp.full((K,), self.p)
        M = numpyro.sample("M", ColumnSpikeSlabNormal(m1, prior, self.C, self.eps))
        logit_M = _slab_logit(jnp.sum(M**2, axis=0), m1, self.p, self.C, self.eps)
        N = numpyro.sample(
            "N", ColumnSpikeSlabNormal(m2, C=self.C, eps=self.eps, slab_logit=logit_M)
        )
        S = jnp.sum(M**2, axis=0) + jnp.sum(N**2, axis=0)
        q = numpyro.deterministic("gamma_slab_prob", jax.nn.sigmoid(self.slab_logit(S, m1 + m2)))
        gamma = numpyro.deterministic("gamma", q * self.C + (1.0 - q) * self.eps)
        return gamma, M, N

    def sample_conditional(self, key, S, d):
        u = jax.random.uniform(key, S.shape, dtype=S.dtype)
        slab = jnp.log(u) < jax.nn.log_sigmoid(self.slab_logit(S, d))
        return jnp.where(slab, jnp.asarray(self.C, S.dtype), jnp.asarray(self.eps, S.dtype))

    def two_point_scales(self):
        """``(eps, C)``: the spike's and the slab's scale."""
        return float(self.eps), float(self.C)

    def column_block(self, gamma):
        """The slab columns (``gamma_h = C``)."""
        return gamma > math.sqrt(self.C * self.eps)

    def column_proposal(self, gamma, z, d):
        """The spike/slab flip of column h with the rescaling ``s = sqrt(gamma'/gamma)``
        (docs/algorithms.md, "Column moves"): deterministic, an involution; the prior ratio is
        ``+-logit(p)``."""
        slab = gamma > math.sqrt(self.C * self.eps)
        dt = gamma.dtype
        new = jnp.where(slab, jnp.asarray(self.eps, dt), jnp.asarray(self.C, dt))
        logit = math.log(self.p) - math.log1p(-self.p)
        log_s = 0.5 * (jnp.log(new) - jnp.log(gamma))
        return new, log_s, jnp.where(slab, -logit, logit).astype(dt)

    def vb_update(self, ES, d):
        logit = self.slab_logit(ES, d)
        q = jax.nn.sigmoid(logit)
        l1 = math.log(self.p) - 0.5 * d * math.log(self.C) - ES / (2.0 * self.C)
        l0 = math.log1p(-self.p) - 0.5 * d * math.log(self.eps) - ES / (2.0 * self.eps)
        return VBGamma(
            inv_mean=q / self.C + (1.0 - q) / self.eps,
            log_normalizer=jnp.logaddexp(l1, l0),
            params={"slab_prob": q},
        )

    def log_prob(self, gamma, d):
        return jnp.where(
            gamma == self.C,
            math.log(self.p),
            jnp.where(gamma == self.eps, math.log1p(-self.p), -jnp.inf),
        )

    def init_gamma(self, K, d, dtype=jnp.float32):
        return jnp.full((K,), self.C, dtype)

    # ------------------------------------------------------------------ diagnostics
    def _two_point(self, slab_prob, threshold):
        p = np.asarray(slab_prob, np.float64)
        return p * (self.C > threshold) + (1.0 - p) * (self.eps > threshold)

    def q_sample(self, params, num_draws, rng):
        p = np.asarray(params["slab_prob"], np.float64)
        return np.where(rng.random((num_draws,) + p.shape) < p, self.C, self.eps)

    def q_prob_above(self, params, threshold):
        return self._two_point(params["slab_prob"], threshold)

    def prob_above(self, draws, threshold):
        # NUTS/SVI on the model integrate gamma out: its "gamma" is E[gamma | M, N], and
        # given M, N each gamma_h is C with probability gamma_slab_prob
        if "gamma_slab_prob" in draws:
            return self._two_point(draws["gamma_slab_prob"], threshold)
        return super().prob_above(draws, threshold)

    def active_threshold(self):
        """The geometric mean ``sqrt(C eps)`` of the slab and the spike."""
        return math.sqrt(self.C * self.eps)

    def gibbs_starts(self):
        """The slab (every column active) and the spike (every column switched off): the
        posterior is multimodal and a chain rarely moves a column between them."""
        return [("slab", self.C), ("spike", self.eps)]
