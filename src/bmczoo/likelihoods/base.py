"""The interface every likelihood component implements.

A likelihood is a frozen dataclass (hashable: a static argument of jitted code) that owns
everything the model's observation part needs: its validation, the likelihood precision
``tau`` the factor blocks use, its NumPyro sample statement for ``obs``, its term of the
VB evidence lower bound, and its command-line name.  Adding a likelihood is one module in
this package; :func:`bmczoo.likelihoods.get_likelihood` finds it by ``name``.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Likelihood", "LOG_2PI"]

LOG_2PI = math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class Likelihood(abc.ABC):
    """Base class of the observation models ``p(Y_k | theta_k)``."""

    name: ClassVar[str] = ""

    #: what ``bmczoo fit --help`` says of it (a short phrase)
    cli_help: ClassVar[str] = ""

    #: whether ``tau`` is a model variable with its own Gibbs block / VB factor
    learned: ClassVar[bool] = False

    #: whether the values are levels observed through a latent Gaussian (probit likelihoods)
    latent: ClassVar[bool] = False

    #: whether each rating has a weight ``w_k`` (its precision ``tau w_k``) with its own
    #: Gibbs block (:meth:`sample_weights`; a scale mixture of normals such as Student-t)
    weighted: ClassVar[bool] = False

    #: whether the values are binary 0/1 (``predict_proba`` gives ``P(Y = 1)``)
    binary: ClassVar[bool] = False

    #: whether every pair of the ``m1 x m2`` matrix is observed: the ratings through
    #: :meth:`gibbs_view` (a target and a weight each), every other pair as a target 0 with
    #: the weight :meth:`unrated_weight` (implicit feedback, :class:`OneClass`); the factor
    #: blocks then add one Gram matrix shared by every row, never an ``m1 x m2`` array
    all_pairs: ClassVar[bool] = False

    #: the methods of :func:`bmczoo.fit` that do not implement it (a clear error there)
    unsupported_methods: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def precision(self, n: int) -> float:
        """The likelihood precision ``tau`` for ``n`` ratings (the starting value when it is
        learned)."""

    def block_precision(self, tau):
        """The precision the Gaussian factor and bias blocks see for a noise precision
        ``tau`` (``temper * tau`` for a tempered learned noise; ``tau`` itself here)."""
        return tau

    def sample_tau(self, key: jax.Array, sse: jax.Array, n: int) -> jax.Array:
        """Gibbs block of a learned ``tau`` given ``SSE = sum_k (R_k - theta_k)^2`` (only
        called when :attr:`learned`)."""
        raise NotImplementedError(f"{type(self).__name__} has a fixed tau")

    def sample_weights(self, key: jax.Array, resid: jax.Array, tau: jax.Array) -> jax.Array:
        """Gibbs block of the per-rating weights (only called when :attr:`weighted`).

        Parameters
        ----------
        key : jax.Array, shape (C,)
            One PRNG key per chain.
        resid : jax.Array, shape (C, n)
            The residuals ``Y - theta`` at the ratings (row order).
        tau : jax.Array, shape (C,)
            The noise precision.

        Returns
        -------
        jax.Array, shape (C, n)
            The weights.
        """
        raise NotImplementedError(f"{type(self).__name__} has no per-rating weights")

    def gibbs_view(self, values, rows, cols):
        """An :attr:`all_pairs` likelihood's ``(targets, weights)`` at the ratings (jax,
        each of the shape of ``values``): the factor blocks fit the targets with rating
        ``k``'s precision ``tau w_k``.  Only called when :attr:`all_pairs`.

        Parameters
        ----------
        values : jax.Array, shape (n,)
            The ratings' values, in the order of one side's ratings.
        rows, cols : jax.Array, shape (n,)
            The row and the column of each rating (same order).
        """
        raise NotImplementedError(f"{type(self).__name__} observes the ratings only")

    def unrated_weight(self) -> float:
        """An :attr:`all_pairs` likelihood's weight of every unrated pair (target 0,
        precision ``tau`` times it)."""
        raise NotImplementedError(f"{type(self).__name__} observes the ratings only")

    def check_values(self, values) -> None:
        """Raise ``ValueError`` where the data's values are not this likelihood's (any
        finite value here).

        Parameters
        ----------
        values : numpy.ndarray
            The ratings' values.
        """

    # ------------------------------------------------------------------ outputs (numpy)
    def noise_variance(self, inv_tau):
        """The noise variance given ``E[1/tau]``: ``inv_tau`` for Gaussian noise.

        Parameters
        ----------
        inv_tau : float or array
            ``E[1/tau]``.
        """
        return inv_tau

    def log_density(self, y, mean, inv_tau):
        """``log p(y | theta = mean)`` with ``1/tau = inv_tau`` (numpy, broadcasting):
        Gaussian here.

        Parameters
        ----------
        y, mean : array
            The values and ``theta`` (data scale).
        inv_tau : float or array
            ``1/tau``.
        """
        return -0.5 * (np.log(2.0 * np.pi * inv_tau) + (y - mean) ** 2 / inv_tau)

    def interval_half_width(self, sd, prob: float):
        """Half-width of the central ``prob`` predictive interval whose predictive sd is
        ``sd`` (numpy): ``Phi^-1((1 + prob)/2) sd``, the Gaussian's, here.

        Parameters
        ----------
        sd : array
            The predictive standard deviations.
        prob : float
            The interval's probability, in (0, 1).
        """
        from statistics import NormalDist

        return NormalDist().inv_cdf(0.5 + 0.5 * prob) * sd

    def noise_draws(self, rng, shape, inv_tau):
        """Draws of the noise ``Y - theta`` given ``1/tau = inv_tau`` (numpy): Gaussian here.

        Parameters
        ----------
        rng : numpy.random.Generator
            The generator.
        shape : tuple of int
            The draws' shape.
        inv_tau : float or array
            ``1/tau`` (broadcast against ``shape``).
        """
        return np.sqrt(inv_tau) * rng.standard_normal(shape)

    def sample_params(self) -> dict:
        """NumPyro sample statements of the likelihood's global variables (e.g. a learned
        ``tau``), called once by the model outside its ``ratings`` plate; the result is
        passed to :meth:`sample_obs` as keywords.  None here."""
        return {}

    @abc.abstractmethod
    def sample_obs(self, mean: jax.Array, n: int, obs: jax.Array | None) -> jax.Array:
        """NumPyro sample statement of the site ``"obs"`` given ``theta`` at the rated
        entries (inside the model's ``ratings`` plate)."""

    def vb_loglik(self, n: int, expected_sse: jax.Array, tau) -> jax.Array:
        """``E_q[log p(Y | theta)]`` given ``E_q[sum_k (Y_k - theta_k)^2]`` (Gaussian with
        precision ``tau``, normalising constant included)."""
        return 0.5 * n * (jnp.log(tau) - LOG_2PI) - 0.5 * tau * expected_sse

    # ------------------------------------------------------------------ VB hooks
    # The VB engine (:mod:`bmczoo.inference.vb`) calls these; the defaults are a fixed
    # ``tau`` (no q-factor).  A learned likelihood keeps ``q(tau)`` in its q-state (a dict
    # of (C,) arrays, replicated over devices).

    def vb_state(self, C: int, dtype) -> dict:
        """The starting q-state of the likelihood's own variables (empty: fixed ``tau``)."""
        return {}

    def vb_block_precision(self, q: dict, tau):
        """The precision the factor and bias blocks see under ``q``: ``tau`` here (scalar),
        ``temper * E_q[tau]`` (C,) for a learned noise."""
        return tau

    def vb_step(self, q: dict, expected_sse: jax.Array, n) -> dict:
        """The optimal q-state given ``E_q[SSE]`` (C,) and the number of ratings ``n``
        (only called when :attr:`learned`)."""
        return q

    def vb_elbo_term(self, q: dict, n, expected_sse: jax.Array, tau) -> jax.Array:
        """The likelihood's part of the ELBO (C,): :meth:`vb_loglik` for a fixed ``tau``;
        a learned likelihood adds ``E[log p(tau)] - E[log q(tau)]``."""
        return self.vb_loglik(n, expected_sse, tau)

    def vb_weights(self, expected_sq: jax.Array, tau: jax.Array) -> jax.Array:
        """A weighted likelihood's ``E_q[w_k]`` (C, n) under the optimal ``q(w)``.

        Parameters
        ----------
        expected_sq : jax.Array, shape (C, n)
            ``E_q[(Y_k - theta_k)^2]`` at every rating.
        tau : jax.Array, shape (C,)
            The block precision ``E_q[tau]``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no VB update of per-rating weights")

    def vb_weighted_elbo_term(self, q: dict, expected_sq: jax.Array) -> jax.Array:
        """A weighted likelihood's part of the ELBO (C,) with ``q(w)`` at its optimum.

        Parameters
        ----------
        q : dict
            The likelihood's q-state (:meth:`vb_state`).
        expected_sq : jax.Array, shape (C, n)
            ``E_q[(Y_k - theta_k)^2]`` at every rating.
        """
        raise NotImplementedError(f"{type(self).__name__} has no VB update of per-rating weights")

    def vb_all_pairs_loglik(self, weights, n_pairs: int, expected_wsse, tau) -> jax.Array:
        """An :attr:`all_pairs` likelihood's ``E_q[log p(every pair | theta)]`` (C,): pair
        ``(i, j)`` Gaussian with precision ``tau w_ij`` (``w_k``: the ratings' weights of
        :meth:`gibbs_view`; :meth:`unrated_weight` at every other pair), normalising
        constant included.

        Parameters
        ----------
        weights : jax.Array, shape (n,)
            The ratings' weights ``w_k``.
        n_pairs : int
            The number of pairs of the matrix, ``m1 m2``.
        expected_wsse : jax.Array, shape (C,)
            ``E_q[sum_ij w_ij (t_ij - theta_ij)^2]`` over every pair (targets 0 off the
            ratings).
        tau : float or jax.Array
            The precision scale.
        """
        n = weights.shape[-1]
        log_w = jnp.sum(jnp.log(weights)) + (n_pairs - n) * math.log(self.unrated_weight())
        return 0.5 * (log_w + n_pairs * (jnp.log(tau) - LOG_2PI)) - 0.5 * tau * expected_wsse

    def vb_params(self, q: dict) -> dict:
        """Parameters of the likelihood's q-factors for a fit's results (empty here)."""
        return {}

    def describe(self) -> dict:
        """Name and settings, for metadata, reports and checkpoints."""
        return {"name": self.name, **dataclasses.asdict(self)}
