"""The one-class likelihood of implicit feedback (Hu, Koren and Volinsky 2008, read as a
likelihood): every pair of the matrix is observed, the rated ones as 1 and the others as 0,
with more confidence in the rated ones."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .._checks import check_real
from .base import Likelihood

__all__ = ["OneClass"]

#: the largest ``m1 * m2`` of the NumPyro model, which builds the full matrix
MAX_MODEL_PAIRS = 2_000_000


@dataclasses.dataclass(frozen=True)
class OneClass(Likelihood):
    """Implicit feedback: ``p_ij ~ N(theta_ij, 1 / (lam c_ij))`` at every pair of the
    ``m1 x m2`` matrix (docs/algorithms.md, "One-class likelihood").

    The data are the observed pairs ``(i, j)`` with a strength ``r_ij >= 0`` each (the
    values of the :class:`~bmczoo.data.RatingData`: 1 for plain pairs, or counts).  The
    preference ``p_ij`` is 1 at an observed pair and 0 at every other pair; the confidence
    ``c_ij`` is ``1 + alpha r_ij`` at an observed pair and ``c0`` elsewhere.  Read as a
    Gaussian likelihood of ``p`` this is the objective of implicit ALS, and it is
    conjugate: a row of ``M`` has the precision ``lam (c0 N^T N + sum_j (c_ij - c0) N_j
    N_j^T) + prior`` (the sum over the row's observed pairs) and the right-hand side ``lam
    sum_j c_ij N_j``.  ``c0 N^T N`` is one ``K x K`` matrix shared by every row, so a Gibbs
    sweep costs what an ALS iteration costs and never builds an ``m1 x m2`` array.

    Gibbs and VB (``all_pairs``: the factor blocks and the CAVI row updates ask
    ``gibbs_view`` and ``unrated_weight``; the ELBO ``vb_all_pairs_loglik``) and, for
    small matrices (``m1 m2 <= 2e6``), the NumPyro model (NUTS, SVI, MAP: the full
    matrix, ``sample_pairs``).  With the row and column biases (``biases=True``: ``theta_ij
    = M_i.N_j + b_i + c_j``, no global mean) in each of them: their sums over every pair
    are shared by the rows (``c0 N^T 1``, ``c0 N^T c``, ``c0 sum_j c_j``, ``c0 m``).  Not
    the sampled offsets, several devices or the annealed switch (each a clear error).  A
    fit neither centres nor clips: ``predict`` gives the posterior mean of ``theta``, a
    score for ranking the unobserved pairs.

    Parameters
    ----------
    alpha : float > 0
        How much a unit of strength adds to an observed pair's confidence.
    c0 : float in (0, 1]
        The confidence of the unobserved pairs (an observed pair has at least 1).
    lam : float > 0
        The precision scale ``lam`` (the block precision ``tau``).
    """

    alpha: float = 1.0
    c0: float = 1.0
    lam: float = 1.0
    name = "one-class"
    cli_help = "implicit feedback: observed pairs against all others, with confidences"
    all_pairs = True

    def __post_init__(self):
        checks = {
            "alpha": dict(low=0.0, low_open=True),
            "c0": dict(low=0.0, low_open=True, high=1.0),
            "lam": dict(low=0.0, low_open=True),
        }
        for name, bounds in checks.items():
            object.__setattr__(self, name, check_real(name, getattr(self, name), **bounds))

    def precision(self, n: int) -> float:
        """``lam``, whatever the number of observed pairs."""
        return self.lam

    def check_values(self, values) -> None:
        """The strengths must be finite and ``>= 0``.

        Parameters
        ----------
        values : numpy.ndarray
            The observed pairs' strengths.
        """
        v = np.asarray(values, np.float64)
        if v.size and not (np.all(np.isfinite(v)) and np.min(v) >= 0.0):
            bad = v[~(np.isfinite(v) & (v >= 0.0))][0]
            raise ValueError(
                f"the {self.name} likelihood reads the values as the observed pairs' "
                f"strengths r >= 0 (1 for plain pairs), got {bad!r}"
            )

    def confidence(self, values):
        """``c = 1 + alpha r`` of observed pairs with strengths ``values`` (numpy or jax).

        Parameters
        ----------
        values : array
            The strengths.
        """
        return 1.0 + self.alpha * values

    # ------------------------------------------------------------------ Gibbs
    def gibbs_view(self, values, rows, cols):
        """Targets 1 and weights ``c = 1 + alpha r`` at the observed pairs."""
        return jnp.ones_like(values), self.confidence(values)

    def unrated_weight(self) -> float:
        """``c0``."""
        return self.c0

    # ------------------------------------------------------------------ outputs
    def log_density(self, y, mean, inv_tau):
        """The observed pairs' part of the likelihood: ``log N(1 | mean, 1/(lam c))`` with
        ``c = 1 + alpha y`` for the strengths ``y`` (numpy, broadcasting; ``inv_tau`` is
        ``1/lam``)."""
        var = inv_tau / self.confidence(np.asarray(y, np.float64))
        return -0.5 * (np.log(2.0 * np.pi * var) + (1.0 - mean) ** 2 / var)

    # ------------------------------------------------------------------ NumPyro
    def sample_obs(self, mean, n, obs):
        """Not used: the one-class likelihood observes every pair (``sample_pairs``)."""
        raise NotImplementedError(
            f"the {self.name} likelihood observes every pair of the matrix: the model calls "
            "its sample_pairs(theta, ratings, observed)"
        )

    def pair_arrays(self, ratings, dtype=np.float64):
        """The preferences ``p`` and confidences ``c`` of every pair (``m1 x m2`` numpy
        arrays each) of ``ratings``; a clear error above ``2e6`` pairs.

        Parameters
        ----------
        ratings : bmczoo.RatingData
            The observed pairs and their strengths.
        dtype : dtype
            The arrays' dtype.
        """
        m1, m2 = ratings.shape
        if m1 * m2 > MAX_MODEL_PAIRS:
            raise ValueError(
                f"the {self.name} likelihood's NumPyro model builds the full {m1} x {m2} "
                f"matrix; it is for matrices of at most {MAX_MODEL_PAIRS:.0e} pairs "
                "(use method='gibbs')"
            )
        self.check_values(ratings.values)
        p = np.zeros((m1, m2), dtype)
        c = np.full((m1, m2), self.c0, dtype)
        p[ratings.rows, ratings.cols] = 1.0
        c[ratings.rows, ratings.cols] = self.confidence(np.asarray(ratings.values, np.float64))
        return p, c

    def sample_pairs(self, theta, ratings, observed: bool = True):
        """The site ``"obs"`` (m1, m2): ``p ~ N(theta, 1/(lam c))`` at every pair, the
        preferences observed (``observed=False``: sampled, the prior predictive).

        Parameters
        ----------
        theta : jax.Array, shape (m1, m2)
            ``M N^T``.
        ratings : bmczoo.RatingData
            The observed pairs and their strengths.
        observed : bool
            Condition on the preferences.
        """
        p, c = self.pair_arrays(ratings, np.dtype(theta.dtype))
        scale = 1.0 / jnp.sqrt(self.lam * jnp.asarray(c))
        obs = jnp.asarray(p) if observed else None
        return numpyro.sample("obs", dist.Normal(theta, scale).to_event(2), obs=obs)
