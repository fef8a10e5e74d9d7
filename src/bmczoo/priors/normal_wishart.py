"""Normal-Wishart (BPMF) row prior: ``M_i ~ N(mu_M, Lambda_M^{-1})`` with
``(mu_M, Lambda_M) ~ NW(0, beta0, W0, nu0)``, separately for the rows of ``M`` and ``N``
(Salakhutdinov & Mnih 2008; docs/algorithms.md, "Normal-Wishart rows").

Unlike the paper's priors it has no column scales ``gamma_h``: its state is
``(mu_M, Lambda_M, mu_N, Lambda_N)`` and the rows get a full ``K x K`` prior precision
and a prior mean, which the shared hot path takes as they are
(:func:`bmczoo.linalg.row_precision`, ``row_rhs(prior_shift=)``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from . import macau
from ._wishart import (  # noqa: F401 - importable from here
    chol_inverse,
    expected_lambda,
    multidigamma,
    _multigammaln,
    nw_posterior,
    nw_vb_term,
    wishart_draw,
)
from ..linalg import features_product
from .base import Prior, as_real_scalar, check_positive, set_fields

__all__ = ["NormalWishart", "wishart_draw", "nw_posterior", "nw_vb_term"]

SIDES = ("M", "N")


def _no_gamma(name: str):
    raise ValueError(
        f"NormalWishart has no column scales gamma_h: {name} does not apply "
        "(its state is mu_M, Lambda_M, mu_N, Lambda_N)"
    )


@dataclasses.dataclass(frozen=True)
class NormalWishart(Prior):
    """BPMF's hierarchical row prior, separately for ``M`` and ``N``.

    ``M_i ~ N(mu_M, Lambda_M^{-1})``, ``Lambda_M ~ Wishart(W0, nu0)``,
    ``mu_M | Lambda_M ~ N(0, (beta0 Lambda_M)^{-1})`` (and the same for ``N``), with
    ``W0 = W0_scale * I``.

    Parameters
    ----------
    beta0 : float > 0
        Prior precision multiplier of the mean (BPMF: 2).
    nu0 : float > K - 1, optional
        Wishart degrees of freedom; ``None`` means ``K`` (checked against K when a fit
        starts).
    W0_scale : float > 0
        Wishart scale ``W0 = W0_scale * I`` (``E[Lambda] = nu0 W0``).

    row_features, col_features : None, True or bmczoo.data.Features, optional
        Side information of the rows / columns (Macau; docs/user-guide/priors.md, "Side
        information, implicit feedback and cold start"): with
        features ``x_i`` the rows are ``M_i ~ N(mu_M + B_M^T x_i, Lambda_M^{-1})``, the
        link ``B_M`` (F x K) has rows ``N(0, (lam_B_M Lambda_M)^{-1})`` and ``lam_B_M ~
        Gamma(a_B, b_B)``.  True means the data's ``row_features`` / ``col_features`` (as
        the MovieLens loaders attach them); a :class:`~bmczoo.data.Features` table must
        have one row per row (column) of the data.  None: no link.
    implicit : bool or {"rows", "cols"}
        Add the implicit-feedback features of the fitted pairs (SVD++: the columns each
        row rated, scaled by ``|R(i)|^-1/2``; :func:`bmczoo.data.implicit_features`) to
        the rows' link (``"rows"``), the columns' (``"cols"``) or both (True).
    a_B, b_B : float > 0
        Shape and rate of the Gamma prior of each link's precision ``lam_B``.

    Gibbs conditional (docs/algorithms.md, "Normal-Wishart rows"): with ``m`` rows,
    ``beta* = beta0 + m``, ``nu* = nu0 + m``, ``mu* = sum_i M_i / beta*``,
    ``W*^{-1} = W0^{-1} + S + (beta0 m / beta*) Mbar Mbar^T``;
    ``Lambda ~ Wishart(W*, nu*)``, ``mu | Lambda ~ N(mu*, (beta* Lambda)^{-1})``.  With a
    link the prior's block draws ``B``, ``lam_B`` and then ``(mu, Lambda)`` given the
    residuals ``M_i - B^T x_i`` (:func:`bmczoo.priors.macau.link_block`).
    """

    beta0: float = 2.0
    nu0: float | None = None
    W0_scale: float = 1.0
    row_features: object = None
    col_features: object = None
    implicit: object = False
    a_B: float = 1.0
    b_B: float = 1.0
    name = "normal-wishart"
    tuned = "W0_scale"
    has_column_scales = False
    link_sites = ("Bt_M", "Bt_N")

    def __post_init__(self):
        set_fields(
            self,
            check_positive(
                "NormalWishart",
                beta0=self.beta0,
                W0_scale=self.W0_scale,
                a_B=self.a_B,
                b_B=self.b_B,
            ),
        )
        object.__setattr__(
            self,
            "row_features",
            macau.check_spec("NormalWishart", "row_features", self.row_features),
        )
        object.__setattr__(
            self,
            "col_features",
            macau.check_spec("NormalWishart", "col_features", self.col_features),
        )
        object.__setattr__(self, "implicit", macau.check_implicit("NormalWishart", self.implicit))
        if self.nu0 is not None:
            object.__setattr__(self, "nu0", as_real_scalar("NormalWishart", "nu0", self.nu0))
            if not self.nu0 > 0 or self.nu0 != self.nu0 or self.nu0 == float("inf"):
                raise ValueError(
                    f"NormalWishart: nu0 must be finite and > K - 1 (None: K), got {self.nu0!r}"
                )

    def degrees(self, K: int) -> float:
        """``nu0`` (``K`` when None); ``ValueError`` unless ``nu0 > K - 1``."""
        nu0 = float(K) if self.nu0 is None else self.nu0
        if not nu0 > K - 1:
            raise ValueError(f"NormalWishart: nu0={nu0:g} must be > K - 1 = {K - 1} for K={K}")
        return nu0

    def hyperparameters(self) -> dict:
        """The numeric hyper-parameters (``a_B``, ``b_B`` only with a link; the link's
        features are described by :meth:`links`)."""
        out = {"beta0": self.beta0, "nu0": self.nu0, "W0_scale": self.W0_scale}
        if self.linked_sides:
            out.update(a_B=self.a_B, b_B=self.b_B)
        return {k: v for k, v in out.items() if v is not None}

    @property
    def linked_sides(self) -> tuple[str, ...]:
        """The factors (``"M"``, ``"N"``) whose rows have a feature link."""
        imp = self.implicit
        return tuple(
            side
            for side, spec, axis in (
                ("M", self.row_features, "rows"),
                ("N", self.col_features, "cols"),
            )
            if spec is not None or imp is True or imp == axis
        )

    def links(self) -> dict:
        """A description of the feature links: per linked factor, the explicit features
        (``"data"`` for the data's, or the table's shape) and whether implicit feedback is
        added."""
        out = {}
        for side, spec, axis in (
            ("M", self.row_features, "rows"),
            ("N", self.col_features, "cols"),
        ):
            if side in self.linked_sides:
                out[side] = {
                    "features": "data"
                    if spec is True
                    else (None if spec is None else list(spec.features.shape)),
                    "implicit": self.implicit is True or self.implicit == axis,
                }
        return out

    def __str__(self) -> str:
        s = super().__str__()
        if not self.linked_sides:
            return s
        return s[:-1] + ", " + ", ".join(f"link_{k}={v}" for k, v in self.links().items()) + ")"

    # ------------------------------------------------------------------ NumPyro
    def sample_latents(self, m1, m2, K):
        """Sites ``Lambda_M ~ Wishart(nu0, W0)``, ``mu_M ~ N(0, (beta0 Lambda_M)^{-1})``,
        ``M`` (m1, K) with rows iid ``N(mu_M, Lambda_M^{-1})``, then ``Lambda_N``, ``mu_N``,
        ``N`` (m2, K) the same way; returns ``(None, M, N)`` (no gamma).

        The model has no ``marginal`` form for this prior: MAP (``AutoDelta``) runs on these
        sites (the Wishart's ``exp(-tr(W0^{-1} Lambda) / 2)`` keeps the joint density
        bounded, unlike a joint MAP over column scales)."""
        nu0 = self.degrees(K)
        eye = jnp.eye(K)
        out = []
        for side, m in zip(SIDES, (m1, m2)):
            Lam = numpyro.sample(
                f"Lambda_{side}", dist.Wishart(nu0, scale_matrix=self.W0_scale * eye)
            )
            mu = numpyro.sample(
                f"mu_{side}",
                dist.MultivariateNormal(jnp.zeros(K), precision_matrix=self.beta0 * Lam),
            )
            F = numpyro.sample(
                side, dist.MultivariateNormal(mu, precision_matrix=Lam).expand([m]).to_event(1)
            )
            out.append(F)
        return None, out[0], out[1]

    def sample_latents_for(self, ratings, K):
        """:meth:`sample_latents` with the feature links: for a linked factor, also
        ``lam_B_F ~ Gamma(a_B, b_B)`` and ``B_F`` (F, K) with rows ``N(0, (lam_B_F
        Lambda_F)^{-1})`` after ``mu_F``, and the rows' mean is ``mu_F + B_F^T x_i``."""
        m1, m2 = ratings.shape
        if not self.linked_sides:
            return self.sample_latents(m1, m2, K)
        nu0 = self.degrees(K)
        eye = jnp.eye(K)
        out = []
        for side, m, spec, axis in zip(
            SIDES, (m1, m2), (self.row_features, self.col_features), ("rows", "cols")
        ):
            Lam = numpyro.sample(
                f"Lambda_{side}", dist.Wishart(nu0, scale_matrix=self.W0_scale * eye)
            )
            mu = numpyro.sample(
                f"mu_{side}",
                dist.MultivariateNormal(jnp.zeros(K), precision_matrix=self.beta0 * Lam),
            )
            loc = mu
            X = macau.side_features(spec, self.implicit, ratings, axis)
            if X is not None:
                lam = numpyro.sample(f"lam_B_{side}", dist.Gamma(self.a_B, self.b_B))
                B = numpyro.sample(
                    f"B_{side}",
                    dist.MultivariateNormal(jnp.zeros(K), precision_matrix=lam * Lam)
                    .expand([X.n_features])
                    .to_event(1),
                )
                loc = mu + features_product(X, B)
            F = numpyro.sample(
                side, dist.MultivariateNormal(loc, precision_matrix=Lam).expand([m]).to_event(1)
            )
            out.append(F)
        return None, out[0], out[1]

    def sample_gamma(self, K, d):
        _no_gamma("sample_gamma")

    # ------------------------------------------------------------------ Gibbs
    def gibbs_state(self, K, m1, m2, dtype=jnp.float32):
        """``mu = 0``, ``Lambda = I`` for both factors."""
        z, eye = jnp.zeros((K,), dtype), jnp.eye(K, dtype=dtype)
        return {"mu_M": z, "Lambda_M": eye, "mu_N": z, "Lambda_N": eye}

    def _no_link(self, what: str):
        if self.linked_sides:
            raise NotImplementedError(
                f"{what} of NormalWishart with feature links ({', '.join(self.linked_sides)}) is not implemented: "
                "the rows' prior means depend on their features; use method='gibbs' or 'nuts'"
            )

    def row_priors(self, state):
        # a linked prior's rows have per-row means (link_row_priors); without the links a
        # caller (fold-in) would silently drop the features
        self._no_link("The plain row prior")
        out = []
        for side in SIDES:
            Lam, mu = state[f"Lambda_{side}"], state[f"mu_{side}"]
            out.append((Lam, jnp.einsum("...kl,...l->...k", Lam, mu)))
        return tuple(out)

    def factor_stats(self, F):
        return jnp.sum(F, axis=-2), jnp.einsum("...ik,...il->...kl", F, F)

    def gibbs_update(self, key, stats_M, stats_N, m1, m2):
        K = stats_M[0].shape[-1]
        dtype = stats_M[0].dtype
        nu0 = self.degrees(K)
        W0_inv = jnp.eye(K, dtype=dtype) / self.W0_scale
        out = {}
        for side, (s1, s2), m, k in zip(SIDES, (stats_M, stats_N), (m1, m2), jax.random.split(key)):
            mu_star, beta_star, nu_star, Winv = nw_posterior(s1, s2, m, self.beta0, nu0, W0_inv)
            out[f"mu_{side}"], out[f"Lambda_{side}"] = wishart_draw(
                k, Winv, nu_star, beta_star, mu_star
            )
        return out

    # ------------------------------------------------------------------ Gibbs (feature links)
    # links: per linked factor F, the arrays of macau.link_arrays under "F/<name>"

    def gibbs_links(self, ratings, dtype=jnp.float32):
        out = {}
        for side, spec, axis in zip(
            SIDES, (self.row_features, self.col_features), ("rows", "cols")
        ):
            X = macau.side_features(spec, self.implicit, ratings, axis)
            if X is not None:
                out.update(
                    {f"{side}/{k}": v for k, v in macau.link_arrays(X, dtype, side=axis).items()}
                )
        return out

    @staticmethod
    def _side_link(links: dict, side: str) -> dict | None:
        prefix = f"{side}/"
        link = {k[len(prefix) :]: v for k, v in links.items() if k.startswith(prefix)}
        return link or None

    def link_state(self, K, links, dtype=jnp.float32):
        """``B = 0``, ``lam_B = 1`` for each linked factor (the state holds ``Bt = V^T B``,
        ``B`` in the eigenbasis of ``X^T X``: ``bmczoo.priors.macau.link_arrays``)."""
        out = {}
        for side in SIDES:
            link = self._side_link(links, side)
            if link is not None:
                out[f"Bt_{side}"] = jnp.zeros((link["d"].shape[0], K), dtype)
                out[f"lam_B_{side}"] = jnp.ones((), dtype)
        return out

    def link_row_priors(self, state, links, m1, m2):
        """A linked factor's shift is per row: ``Lambda (mu + B^T x_i)`` (C, m, K)."""
        out = []
        for side, m in zip(SIDES, (m1, m2)):
            Lam, mu = state[f"Lambda_{side}"], state[f"mu_{side}"]
            link = self._side_link(links, side)
            mean = (
                mu
                if link is None
                else mu[:, None, :] + macau.coords_mean(link, state[f"Bt_{side}"])
            )
            out.append((Lam, jnp.einsum("ckl,c...l->c...k", Lam, mean)))
        return tuple(out)

    def link_factor_stats(self, F, links, side):
        """``(sum_i F_i, F^T F)`` and, for a linked factor, ``V^T X^T F`` (C, F, K)."""
        stats = self.factor_stats(F)
        link = self._side_link(links, side)
        if link is None:
            return stats
        return stats + (macau.coords_stats(link, F),)

    def link_update(self, key, state, stats_M, stats_N, m1, m2, links):
        K = stats_M[0].shape[-1]
        dtype = stats_M[0].dtype
        nu0 = self.degrees(K)
        W0_inv = jnp.eye(K, dtype=dtype) / self.W0_scale
        hyper = macau.LinkHyper(self.beta0, nu0, self.W0_scale, self.a_B, self.b_B)
        out = {}
        for side, stats, m, k in zip(SIDES, (stats_M, stats_N), (m1, m2), jax.random.split(key)):
            link = self._side_link(links, side)
            if link is None:
                mu_star, beta_star, nu_star, Winv = nw_posterior(
                    stats[0], stats[1], m, self.beta0, nu0, W0_inv
                )
                out[f"mu_{side}"], out[f"Lambda_{side}"] = wishart_draw(
                    k, Winv, nu_star, beta_star, mu_star
                )
                continue
            chain = macau.LinkChain(*(state[f"{n}_{side}"] for n in ("mu", "Lambda", "lam_B")))
            mu, Lam, Bt, lam = macau.link_block(
                k, link, chain, macau.LinkRows(*stats), m, hyper, W0_inv
            )
            out.update(
                {f"mu_{side}": mu, f"Lambda_{side}": Lam, f"Bt_{side}": Bt, f"lam_B_{side}": lam}
            )
        return out

    def sample_conditional(self, key, S, d):
        _no_gamma("sample_conditional")

    # ------------------------------------------------------------------ VB
    # q(mu_F, Lambda_F) = NW(mu*, beta*, W*, nu*) for F = M, N, stored as
    # {"mu_F": (C, K), "beta_F": (C,), "nu_F": (C,), "Winv_F": (C, K, K)}.

    def vb_state(self, K, m1, m2, C, dtype=jnp.float32, gamma=1.0):
        """``mu* = 0``, ``beta* = beta0``, ``nu* = nu0``, ``W* = I / nu0`` (so
        ``E[Lambda] = I``, the Gibbs start) for both factors; ``gamma`` is not used."""
        self._no_link("Mean-field VB")
        nu0 = self.degrees(K)
        q = {}
        for side in SIDES:
            q[f"mu_{side}"] = jnp.zeros((C, K), dtype)
            q[f"beta_{side}"] = jnp.full((C,), self.beta0, dtype)
            q[f"nu_{side}"] = jnp.full((C,), nu0, dtype)
            q[f"Winv_{side}"] = jnp.broadcast_to(nu0 * jnp.eye(K, dtype=dtype), (C, K, K))
        return q

    def vb_row_priors(self, q):
        """``(E[Lambda], E[Lambda mu]) = (nu* W*, nu* W* mu*)`` for each factor."""
        out = []
        for side in SIDES:
            EL = expected_lambda(q[f"Winv_{side}"], q[f"nu_{side}"])
            out.append((EL, jnp.einsum("...kl,...l->...k", EL, q[f"mu_{side}"])))
        return tuple(out)

    def vb_factor_stats(self, m, V):
        """``(sum_i m_i, sum_i V_i + m_i m_i^T)``: (C, K), (C, K, K)."""
        return jnp.sum(m, axis=1), jnp.einsum("cik,cil->ckl", m, m) + jnp.sum(V, axis=1)

    def vb_step(self, stats_M, stats_N, m1, m2, dtype=None):
        """The conjugate NW update with the expected moments (``nw_posterior``, run by run)."""
        K = stats_M[0].shape[-1]
        dt = stats_M[0].dtype if dtype is None else dtype
        nu0 = self.degrees(K)
        W0_inv = jnp.eye(K, dtype=stats_M[0].dtype) / self.W0_scale
        q = {}
        for side, (s1, s2), m in zip(SIDES, (stats_M, stats_N), (m1, m2)):
            # nw_posterior run by run (leading axis C)
            beta, nu = self.beta0 + m, nu0 + m
            mu = s1 / beta
            Winv = W0_inv + s2 - s1[:, :, None] * s1[:, None, :] / beta
            Winv = 0.5 * (Winv + jnp.swapaxes(Winv, -1, -2))
            C = s1.shape[0]
            q[f"mu_{side}"] = mu.astype(dt)
            q[f"beta_{side}"] = jnp.full((C,), beta, dt)
            q[f"nu_{side}"] = jnp.full((C,), nu, dt)
            q[f"Winv_{side}"] = Winv.astype(dt)
        return q

    def vb_elbo_term(self, q, stats_M, stats_N, m1, m2):
        """``sum_F E_q[log p(F | mu_F, Lambda_F)] + E_q[log NW(mu_F, Lambda_F)] -
        E_q[log q(mu_F, Lambda_F)]`` at the stored ``q`` (any NW parameters).  At the
        optimum of :meth:`vb_step` it equals the log NW evidence of Murphy (2007) with
        ``sum x x^T`` replaced by ``sum_i (m_i m_i^T + V_i)`` (tested)."""
        K = stats_M[0].shape[-1]
        nu0 = self.degrees(K)
        total = 0.0
        for side, (s1, s2), m in zip(SIDES, (stats_M, stats_N), (m1, m2)):
            total = total + nw_vb_term(
                q[f"mu_{side}"],
                q[f"beta_{side}"],
                q[f"nu_{side}"],
                q[f"Winv_{side}"],
                s1,
                s2,
                m,
                self.beta0,
                nu0,
                self.W0_scale,
            )
        return total

    def vb_params(self, q, stats_M, stats_N, m1, m2):
        """``mu_F, beta_F, nu_F, W_F`` (the scale ``W*``, not its inverse) and
        ``E_Lambda_F = nu* W*`` of ``q(mu_F, Lambda_F)`` for F = M, N (one run)."""
        out = {}
        for side in SIDES:
            Winv = q[f"Winv_{side}"]
            W = jnp.linalg.inv(Winv)
            out[f"mu_{side}"], out[f"beta_{side}"], out[f"nu_{side}"] = (
                q[f"mu_{side}"],
                q[f"beta_{side}"],
                q[f"nu_{side}"],
            )
            out[f"W_{side}"] = 0.5 * (W + jnp.swapaxes(W, -1, -2))
            out[f"E_Lambda_{side}"] = q[f"nu_{side}"][..., None, None] * out[f"W_{side}"]
        return out

    # ------------------------------------------------------------------ no gamma
    def vb_update(self, ES, d):
        _no_gamma("vb_update")

    def q_sample(self, params, num_draws, rng):
        _no_gamma("q_sample")

    def q_prob_above(self, params, threshold):
        _no_gamma("q_prob_above")

    def prob_above(self, draws, threshold):
        _no_gamma("prob_above")

    def init_gamma(self, K, d, dtype=jnp.float32):
        _no_gamma("init_gamma")
