"""The interface every prior on the column scales ``gamma_h`` implements.

A prior is a small frozen dataclass of hyper-parameters (hashable, so it can be a static
argument of a jitted function).  It is a *component* of the model: everything that
depends on which prior is used lives in its module, and the samplers, VB, diagnostics,
the command line and the experiments only call the methods below (they never branch on
a prior's name):

* NumPyro sample statements (:meth:`Prior.sample_latents`): ``gamma`` then the columns of
  ``M`` and ``N``;
* the Gibbs block: the row prior it puts on ``M`` and ``N`` given its state
  (:meth:`Prior.row_prior`, a per-column precision here) and the exact conditional of
  ``gamma`` given ``S_h = ||M_h||^2 + ||N_h||^2`` (:meth:`Prior.sample_conditional`);
* its mean-field VB update (:meth:`Prior.vb_update`): ``E_q[1/gamma_h]``, the
  log-normaliser that enters the ELBO and the parameters of ``q(gamma_h)``; the VB
  engine reaches it through the generic VB hooks (:meth:`Prior.vb_state`,
  :meth:`Prior.vb_row_priors`, :meth:`Prior.vb_factor_stats`, :meth:`Prior.vb_step`,
  :meth:`Prior.vb_elbo_term`, :meth:`Prior.vb_params`), whose defaults are the
  column-scale family's and which a prior of another family overrides;
* what diagnostics need of ``q(gamma)`` and of draws (:meth:`Prior.q_sample`,
  :meth:`Prior.q_prob_above`, :meth:`Prior.prob_above`, :meth:`Prior.active_threshold`);
* its command-line name and defaults (``name``, ``cli_defaults``), the hyper-parameter
  an experiment grid varies (``tuned``) and the Gibbs starts worth comparing
  (:meth:`Prior.gibbs_starts`).

Adding a prior means writing one module with one subclass and registering nothing else:
:func:`bmczoo.priors.get_prior` and :func:`bmczoo.priors.registry` find subclasses by
their ``name``.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["Prior", "VBGamma", "check_positive", "set_fields"]

LOG_2PI = math.log(2.0 * math.pi)


def as_real_scalar(owner: str, name: str, value) -> float:
    """``value`` as a Python float, or ``ValueError`` unless it is a real (int or float)
    scalar: bools, complex numbers, strings and arrays with elements are rejected."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}") from None
    if arr.shape != () or arr.dtype.kind not in "iuf":
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}")
    return float(arr)


def check_positive(owner: str, **params) -> dict[str, float]:
    """Each parameter as a float; ``ValueError`` unless it is a finite real number > 0."""
    out = {}
    for name, value in params.items():
        v = as_real_scalar(owner, name, value)
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{owner}: {name} must be finite and > 0, got {value!r}")
        out[name] = v
    return out


def set_fields(obj, values: dict[str, float]) -> None:
    """Store validated floats on a frozen dataclass (hashable, usable as a static argument)."""
    for name, v in values.items():
        object.__setattr__(obj, name, v)


class VBGamma(NamedTuple):
    """Result of a prior's VB update for ``q(gamma_h)``, all arrays of shape (..., K).

    Attributes
    ----------
    inv_mean : E_q[1/gamma_h], the weights that enter the row precisions.
    log_normalizer : log of ``Z_h = int p(g) g^(-d/2) exp(-E[S_h] / (2 g)) dg``; at the
        optimal ``q(gamma_h)`` the gamma part of the ELBO equals
        ``log_normalizer - (d/2) log(2 pi)`` (summed over h).
    params : the parameters of ``q(gamma_h)`` (prior-specific names).
    """

    inv_mean: jax.Array
    log_normalizer: jax.Array
    params: dict


def indicator_above(draws: dict, threshold: float) -> np.ndarray:
    """``1{gamma_h > threshold}`` for each draw of gamma (..., K): the probability that
    ``gamma_h > threshold`` given a draw that includes gamma."""
    if "gamma" not in draws:
        raise ValueError("the fit has no draws of gamma")
    return (np.asarray(draws["gamma"]) > threshold).astype(np.float64)


@dataclasses.dataclass(frozen=True)
class Prior(abc.ABC):
    """Base class of the zoo's priors on ``gamma_h`` (iid over ``h = 1..K``).

    Attributes
    ----------
    name : the registry / command-line name (``bmczoo fit --prior NAME``).
    cli_defaults : hyper-parameters the command line and the experiments use when none
        are given (e.g. the paper's values); empty means the dataclass defaults.
    tuned : the hyper-parameter an experiment grid varies (x1/2, x1, x2); None: the first
        field.
    """

    name: ClassVar[str] = ""
    cli_defaults: ClassVar[dict] = {}
    tuned: ClassVar[str | None] = None

    # ------------------------------------------------------------------ NumPyro
    @abc.abstractmethod
    def sample_gamma(self, K: int, d: int) -> jax.Array:
        """NumPyro sample statement for the site ``"gamma"`` (shape (K,))."""

    def sample_latents(self, m1: int, m2: int, K: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """NumPyro sample statements for ``gamma``, ``M`` (m1 x K) and ``N`` (m2 x K).

        ``M[:, h] ~ N(0, gamma_h I)`` and ``N[:, h] ~ N(0, gamma_h I)`` given gamma.
        """
        gamma = self.sample_gamma(K, m1 + m2)
        scale = jnp.sqrt(gamma)
        M = numpyro.sample("M", dist.Normal(0.0, scale).expand([m1, K]).to_event(2))
        N = numpyro.sample("N", dist.Normal(0.0, scale).expand([m2, K]).to_event(2))
        return gamma, M, N

    # ------------------------------------------------------------------ Gibbs (generic)
    # The Gibbs engine (:mod:`bmczoo.inference.gibbs`) only calls these four hooks; the
    # defaults implement the column-scale family (state ``{"gamma": (K,)}``).  A prior of
    # another family (e.g. :class:`~bmczoo.priors.NormalWishart`) overrides them.

    #: whether the prior has column scales ``gamma_h`` (rank diagnostics need them)
    has_column_scales: ClassVar[bool] = True

    def gibbs_state(self, K: int, m1: int, m2: int, dtype=jnp.float32) -> dict[str, jax.Array]:
        """The prior's starting Gibbs state for one chain (a dict of arrays; its keys are
        the draws' variable names): ``{"gamma": init_gamma}`` here."""
        return {"gamma": self.init_gamma(K, m1 + m2, dtype)}

    def row_priors(self, state: dict) -> tuple[tuple, tuple]:
        """The row priors of ``M`` and of ``N`` given the prior's state (leading chain axis):
        ``((precision_M, shift_M), (precision_N, shift_N))``, each precision (C, K)
        (diagonal) or (C, K, K), each shift the prior-mean term ``Lambda mu`` (C, K) or
        None (zero mean)."""
        p = self.row_prior(state["gamma"])
        return (p, None), (p, None)

    def factor_stats(self, F: jax.Array):
        """Sums over the rows of a factor (C, m, K) that the prior's conditional needs
        (a pytree of sums, so a sharded run adds the devices' parts): ``sum_i F_ih^2``."""
        return jnp.sum(F * F, axis=-2)

    def gibbs_update(
        self, key: jax.Array, stats_M, stats_N, m1: int, m2: int
    ) -> dict[str, jax.Array]:
        """Draw the prior's state (one chain) from its conditional given the factor
        statistics of :meth:`factor_stats` (one chain's)."""
        return {"gamma": self.sample_conditional(key, stats_M + stats_N, m1 + m2)}

    # ------------------------------------------------------------------ Gibbs (feature links)
    # A prior whose rows have feature-driven means (the Normal-Wishart prior with
    # ``row_features=`` / ``col_features=``; docs/user-guide/priors.md) needs the feature arrays
    # inside the traced sweep.  Priors are static (hashed) arguments of jitted functions, so
    # the arrays live in the problem (``GibbsProblem.links``, built once from the data by
    # :meth:`gibbs_links`) and reach the prior through these hooks.  The engine calls them
    # only when ``links`` is not empty; otherwise it calls the four hooks above, so a prior
    # without a link needs none of these.

    #: names of state variables that are as large as a factor (a link matrix ``B``, in the
    #: Gibbs state as its coordinates ``Bt``): not in the draws, where ``B`` is kept with
    #: the factors (``bmczoo.priors.macau.stored_links``)
    link_sites: ClassVar[tuple[str, ...]] = ()

    def gibbs_links(self, ratings, dtype=jnp.float32) -> dict[str, jax.Array]:
        """The device arrays of the prior's feature links for the fitted data.

        Parameters
        ----------
        ratings : bmczoo.data.RatingData
            The fitted ratings (their features, and their pattern for implicit feedback).
        dtype : dtype
            The float dtype of the arrays.

        Returns
        -------
        dict
            A flat dict of arrays, empty (the default) when the prior has no link.
        """
        return {}

    def link_state(self, K: int, links: dict, dtype=jnp.float32) -> dict[str, jax.Array]:
        """The starting values of the link's own variables (one chain), added to
        :meth:`gibbs_state`.

        Parameters
        ----------
        K : int
            The rank.
        links : dict
            The arrays of :meth:`gibbs_links`.
        dtype : dtype
            The float dtype of the state.
        """
        return {}

    def link_row_priors(self, state: dict, links: dict, m1: int, m2: int) -> tuple[tuple, tuple]:
        """:meth:`row_priors` with the links: each shift may also be per row, (C, m, K).

        Parameters
        ----------
        state : dict
            The prior's state (leading chain axis).
        links : dict
            The arrays of :meth:`gibbs_links`.
        m1, m2 : int
            The numbers of rows of ``M`` and of ``N``.
        """
        return self.row_priors(state)

    def link_factor_stats(self, F: jax.Array, links: dict, side: str):
        """:meth:`factor_stats` of one factor with the links (sums over rows, so a sharded
        run could add the devices' parts).

        Parameters
        ----------
        F : jax.Array
            The factor (C, m, K).
        links : dict
            The arrays of :meth:`gibbs_links`.
        side : {"M", "N"}
            Which factor ``F`` is.
        """
        return self.factor_stats(F)

    def link_update(
        self, key: jax.Array, state: dict, stats_M, stats_N, m1: int, m2: int, links: dict
    ) -> dict:
        """:meth:`gibbs_update` with the links; also given the prior's current ``state``
        (one chain), as a link's blocks are drawn in turn (Gibbs within the prior).

        Parameters
        ----------
        key : jax.Array
            The PRNG key of this draw.
        state : dict
            The prior's current state (one chain).
        stats_M, stats_N : pytree
            The statistics of :meth:`link_factor_stats` of ``M`` and of ``N``.
        m1, m2 : int
            The numbers of rows of ``M`` and of ``N``.
        links : dict
            The arrays of :meth:`gibbs_links`.
        """
        return self.gibbs_update(key, stats_M, stats_N, m1, m2)

    def sample_latents_for(self, ratings, K: int):
        """NumPyro sample statements of :meth:`sample_latents` for the data ``ratings``
        (a prior with a feature link reads the data's features); the default ignores
        everything but the shape.

        Parameters
        ----------
        ratings : bmczoo.data.RatingData
            The modelled ratings.
        K : int
            The rank.
        """
        m1, m2 = ratings.shape
        return self.sample_latents(m1, m2, K)

    def two_point_scales(self) -> tuple[float, float] | None:
        """``(spike, slab)`` for a prior whose column scales take two values (the discrete
        prior's ``(eps, C)``): the tensor sampler's spike/slab swaps re-draw a column from
        a data-driven proposal when it turns on; None (the default): none."""
        return None

    def column_block(self, gamma: jax.Array):
        """For a prior whose columns share a few scale values (the discrete prior's slab):
        the (..., K) mask of the columns in the slab, among which the posterior is
        invariant under rotations (equal scales), so that the column moves may first
        reflect the slab towards its least-energy direction (:func:`bmczoo.inference.gibbs.column_moves`).
        None (the default): no reflection."""
        return None

    def column_proposal(self, gamma: jax.Array, z: jax.Array, d: int):
        """Proposal of the Gibbs column moves (docs/algorithms.md, "Column moves"): a new scale
        ``gamma_h'`` for each column together with the factor ``s_h`` by which the
        rescaled factor's column is multiplied.

        ``gamma`` (..., K) the current scales, ``z`` (..., K) standard normals (for a
        random proposal), ``d = m1 + m2``.  Returns ``(gamma', log_s, log_ratio)`` with
        ``log_ratio = log p(gamma') - log p(gamma) + log q(gamma | gamma') - log q(gamma' |
        gamma)`` (prior and proposal, the engine adds the factor's prior, the Jacobian
        ``m log s`` and the marginal likelihood).  The proposal must be an involution in
        distribution (the reverse move has the same law).  None: the prior has no column
        move (the default)."""
        return None

    @property
    def has_column_move(self) -> bool:
        """Whether the Gibbs column moves apply to this prior: column scales and a
        :meth:`column_proposal`."""
        return (
            self.has_column_scales
            and self.column_proposal(jnp.ones(1), jnp.zeros(1), 2) is not None
        )

    #: step of the log-scale random walk of :meth:`log_walk_proposal`
    column_step: ClassVar[float] = 0.5

    #: sweeps between two rounds of column moves when ``column_moves_every`` is not given
    #: (:class:`~bmczoo.inference.Gibbs`); a prior whose moves mix its rank with fewer rounds
    #: sets it higher
    column_moves_every: ClassVar[int] = 1

    def log_walk_proposal(self, gamma: jax.Array, z: jax.Array, d: int):
        """The column proposal of a continuous prior: ``gamma' = gamma exp(step z)`` with
        ``s = sqrt(gamma'/gamma)``; ``log_ratio = log p(gamma') - log p(gamma) + log gamma'
        - log gamma`` (the proposal is symmetric in ``log gamma``)."""
        g2 = gamma * jnp.exp(self.column_step * z)
        log_ratio = self.log_prob(g2, d) - self.log_prob(gamma, d) + jnp.log(g2) - jnp.log(gamma)
        return g2, 0.5 * self.column_step * z, log_ratio.astype(gamma.dtype)

    # ------------------------------------------------------------------ Gibbs (column scales)
    def row_prior(self, gamma: jax.Array) -> jax.Array:
        """Prior precision of each row of ``M`` and of ``N`` given the prior's state:
        (..., K) for a diagonal ``diag(1/gamma)`` (this family) or (..., K, K) for a full
        matrix; the hot path (:func:`bmczoo.linalg.row_precision`) takes both."""
        return 1.0 / gamma

    @abc.abstractmethod
    def sample_conditional(self, key: jax.Array, S: jax.Array, d: int) -> jax.Array:
        """Draw ``gamma`` from its conditional given ``S`` (shape (..., K)), with ``d = m1 + m2``."""

    # ------------------------------------------------------------------ VB
    @abc.abstractmethod
    def vb_update(self, ES: jax.Array, d: int) -> VBGamma:
        """Optimal ``q(gamma_h)`` given ``E_q[S_h]`` (shape (..., K))."""

    # ------------------------------------------------------------------ VB (generic)
    # The VB engine (:mod:`bmczoo.inference.vb`) only calls these five hooks; the
    # defaults implement the column-scale family (q-state ``{"inv_gamma": (C, K)}``, its
    # optimum a function of ``E_q[S_h]`` through :meth:`vb_update`).  A prior of another
    # family (e.g. :class:`~bmczoo.priors.NormalWishart`) overrides them.  Every array
    # carries the leading run axis ``C``.

    def vb_state(
        self, K: int, m1: int, m2: int, C: int, dtype=jnp.float32, gamma: float | None = 1.0
    ) -> dict:
        """The starting q-state (a dict of (C, ...) arrays, replicated over devices):
        ``{"inv_gamma": 1/gamma}`` here (``gamma=None``: the prior's :meth:`init_gamma`)."""
        g = self.init_gamma(K, m1 + m2, dtype) if gamma is None else jnp.full((K,), gamma, dtype)
        return {"inv_gamma": jnp.broadcast_to(1.0 / g, (C, K))}

    def vb_row_priors(self, q: dict) -> tuple[tuple, tuple]:
        """The rows' expected prior terms under ``q``: ``((E[Lambda_M], E[Lambda_M mu_M]),
        (E[Lambda_N], E[Lambda_N mu_N]))`` as in :meth:`row_priors` (precision (C, K)
        diagonal or (C, K, K); shift (C, K) or None): ``diag(E[1/gamma])``, no shift here."""
        return (q["inv_gamma"], None), (q["inv_gamma"], None)

    def vb_factor_stats(self, m: jax.Array, V: jax.Array):
        """Sums over the rows of ``q(F) = prod_i N(m_i, V_i)`` ((C, rows, K), (C, rows, K, K))
        that the prior's q-update needs (a pytree of sums: a sharded run adds the devices'
        parts; padding rows are zeroed by the caller): ``sum_i m_ih^2 + V_i[h, h]``."""
        return jnp.sum(m**2, axis=1) + jnp.sum(jnp.diagonal(V, axis1=-2, axis2=-1), axis=1)

    def vb_step(self, stats_M, stats_N, m1: int, m2: int, dtype=None) -> dict:
        """The optimal q-state given the factor statistics of :meth:`vb_factor_stats`:
        ``{"inv_gamma": E_q[1/gamma_h]}`` from :meth:`vb_update` at ``E[S] = stats_M + stats_N``."""
        ES = stats_M + stats_N
        return {
            "inv_gamma": self.vb_update(ES, m1 + m2).inv_mean.astype(
                ES.dtype if dtype is None else dtype
            )
        }

    def vb_elbo_term(self, q: dict, stats_M, stats_N, m1: int, m2: int) -> jax.Array:
        """``E_q[log p(M, N | prior variables)] + E_q[log p(prior variables)] - E_q[log q]``
        (C,), the prior's part of the ELBO.  The column-scale family evaluates it at the
        optimal ``q(gamma)`` for the statistics (``q`` is not read): ``sum_h log Z_h -
        (d/2) K log(2 pi)`` (see :class:`VBGamma`); a prior whose q-state holds all its
        parameters evaluates it at ``q`` itself."""
        d = m1 + m2
        ES = stats_M + stats_N
        qg = self.vb_update(ES, d)
        return jnp.sum(qg.log_normalizer, axis=-1) - 0.5 * d * ES.shape[-1] * LOG_2PI

    def vb_params(self, q: dict, stats_M, stats_N, m1: int, m2: int) -> dict:
        """The parameters of the optimal q of the prior's variables, for a fit's results
        (one run: no leading axis): ``inv_mean`` and the params of :meth:`vb_update`."""
        qg = self.vb_update(stats_M + stats_N, m1 + m2)
        return {"inv_mean": qg.inv_mean, **qg.params}

    # ------------------------------------------------------------------ diagnostics
    @abc.abstractmethod
    def q_sample(self, params: dict, num_draws: int, rng: np.random.Generator) -> np.ndarray:
        """``num_draws`` draws (num_draws, K) of gamma from ``q(gamma)`` given the
        parameters ``params`` of :meth:`vb_update` (numpy arrays of shape (K,), with
        ``inv_mean``), using the numpy generator ``rng``."""

    @abc.abstractmethod
    def q_prob_above(self, params: dict, threshold: float) -> np.ndarray:
        """``q(gamma_h > threshold)`` for each h (K,), exactly, from the parameters of
        ``q(gamma_h)`` (as in :meth:`q_sample`)."""

    def prob_above(self, draws: dict, threshold: float) -> np.ndarray:
        """``P(gamma_h > threshold | draw)`` for each draw of an MCMC or guide: (..., K).

        ``draws`` holds the sampled sites (``gamma`` (..., K) at least).  The default is the
        indicator of the drawn ``gamma_h``; a prior whose NumPyro model integrates gamma
        out overrides it with the exact conditional probability."""
        return indicator_above(draws, threshold)

    def active_threshold(self) -> float | None:
        """A natural threshold on ``gamma_h`` for counting active columns, or None (then
        diagnostics use a relative cut, 1% of the largest posterior mean)."""
        return None

    # ------------------------------------------------------------------ experiments
    def gibbs_starts(self) -> list[tuple[str, float | None]]:
        """The Gibbs starting values of gamma worth comparing on validation data, as
        ``(label, init_gamma)``; ``None`` is the prior's own :meth:`init_gamma`."""
        return [("default", None)]

    # ------------------------------------------------------------------ helpers
    def log_prob(self, gamma: jax.Array, d: int) -> jax.Array:
        """Prior log density (log mass for discrete priors) of each ``gamma_h`` (tested
        against scipy; used by the Geweke and quadrature checks)."""
        raise NotImplementedError(f"{type(self).__name__} does not define log_prob")

    @abc.abstractmethod
    def init_gamma(self, K: int, d: int, dtype=jnp.float32) -> jax.Array:
        """A deterministic starting value of gamma for samplers and VB (shape (K,))."""

    @classmethod
    def tuned_name(cls) -> str:
        """The hyper-parameter an experiment grid varies (``tuned``, else the first field)."""
        return cls.tuned or dataclasses.fields(cls)[0].name

    @classmethod
    def from_cli(cls, **hyper) -> "Prior":
        """The prior with ``cli_defaults`` updated by ``hyper``."""
        return cls(**{**cls.cli_defaults, **hyper})

    def hyperparameters(self) -> dict:
        """The hyper-parameters as a plain dict (for metadata and reports)."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v:g}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"
