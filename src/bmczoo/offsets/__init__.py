"""Offset components: what is added to ``theta = M N^T`` to predict a rating.

:class:`GlobalMean`: the model is fitted to the ratings minus their mean, which is added
back to every prediction, and predictions may be clipped to the observed range (star
ratings).  :class:`Biases` (``bmc.fit(..., biases=True)``): row and column biases
``theta_ij = (M N^T)_ij + b_i + c_j`` with inverse-gamma variances, sampled/fitted with
the factors.  :class:`Shift` is the resulting map from ``theta`` to a
prediction; its :meth:`Shift.apply` is the one place where the offset and the clipping
are applied (results, VB's RMSE trace, and the Gibbs kernel's jitted RMSE all call it).
:class:`Context` is a sampled offset (:class:`~bmczoo.offsets.base.Offset`): per-rating
covariates with Gaussian weights and a precision per feature group.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..data import RatingData

__all__ = ["GlobalMean", "Biases", "Context", "Offset", "Shift", "looks_like_ratings", "get_biases"]


def looks_like_ratings(values: np.ndarray) -> bool:
    """True when every value is a multiple of 0.5 in a small range (star ratings).

    Parameters
    ----------
    values : array_like
        The ratings.
    """
    v = np.asarray(values)
    lo, hi = float(v.min()), float(v.max())
    return bool(hi - lo <= 10 and np.all(np.round(2 * v) == 2 * v))


@dataclasses.dataclass(frozen=True)
class Shift:
    """Prediction = ``clip(theta + offset, lo, hi)`` (``lo, hi = -inf, inf``: no clipping)."""

    offset: float = 0.0
    lo: float = -math.inf
    hi: float = math.inf

    @property
    def clip(self) -> tuple[float, float] | None:
        return None if (self.lo, self.hi) == (-math.inf, math.inf) else (self.lo, self.hi)

    def apply(self, theta):
        """Works on numpy and JAX arrays (both have ``.clip``)."""
        return shift_clip(theta, self.offset, self.lo, self.hi)


def shift_clip(theta, offset, lo, hi):
    """``clip(theta + offset, lo, hi)`` for numpy or JAX arrays (also traced values)."""
    return (theta + offset).clip(lo, hi)


@dataclasses.dataclass(frozen=True)
class GlobalMean:
    """The global centring: fit ``Y - mean(Y)`` and add the mean back.

    Parameters
    ----------
    center : bool
        Subtract the training mean (False: fit the raw values, offset 0).
    clip : "auto", bool or (lo, hi)
        Clip predictions: ``"auto"`` to the observed range when the values look like star
        ratings (multiples of 0.5 within a span of 10), ``True`` to the observed range,
        ``False``/``None`` never, or to a given range.
    """

    center: bool = True
    clip: object = "auto"
    name = "global-mean"

    def __post_init__(self):
        from .._checks import check_bool

        check_bool("center", self.center)
        c = self.clip
        if isinstance(c, str):
            if c != "auto":
                raise ValueError(f"clip must be 'auto', a bool or (lo, hi), got {c!r}")
        elif not (c is None or isinstance(c, (bool, np.bool_))):
            if not (isinstance(c, (tuple, list)) and len(c) == 2):
                raise TypeError(f"clip must be 'auto', a bool or a pair (lo, hi), got {c!r}")
            lo, hi = (float(x) for x in c)
            if not lo < hi:
                raise ValueError(f"clip range must have lo < hi, got {c!r}")
            object.__setattr__(self, "clip", (lo, hi))

    def prepare(self, train: RatingData) -> tuple[RatingData, Shift]:
        """The data the model is fitted to and the map from ``theta`` to predictions."""
        fit_data, offset = train.centered() if self.center else (train, 0.0)
        c = self.clip
        if c == "auto":
            c = looks_like_ratings(train.values)
        if c is True or c is np.True_:
            lo, hi = train.value_range()
        elif c is None or c is False or c is np.False_:
            lo, hi = -math.inf, math.inf
        else:
            lo, hi = c
        return fit_data, Shift(float(offset), float(lo), float(hi))


@dataclasses.dataclass(frozen=True)
class Biases:
    """Row and column biases: ``theta_ij = (M N^T)_ij + b_i + c_j`` (docs/algorithms.md, "Biases"),
    ``b_i ~ N(0, s_b^2)``, ``c_j ~ N(0, s_c^2)``, ``s_b^2, s_c^2 ~ InvGamma(a, b)``
    (on the centred scale).  NumPyro sites ``row_bias``, ``col_bias``, ``row_bias_var``,
    ``col_bias_var``.

    Gibbs: each bias is a univariate Gaussian given the rest (precision
    ``1/s^2 + tau n_i``), each variance ``InvGamma(a + m/2, b + sum b_i^2 / 2)``.

    With features (``row_features=``, ``col_features=``, ``implicit=``, the same
    specifications as :class:`~bmczoo.priors.NormalWishart`'s), a side's biases have prior
    means linear in the features: ``b_i ~ N(x_i^T w, s_b^2)``, ``w ~ N(0, (s_b^2 / lam_w)
    I_F)``, ``lam_w ~ Gamma(a_w, b_w)`` (NumPyro sites ``row_bias_w``, ``row_bias_lam``;
    docs/user-guide/priors.md, "Side information, implicit feedback and cold start"): a row
    with features and no ratings gets the bias its features predict.  Gibbs draws ``w``,
    then ``s_b^2``, then ``lam_w`` from their exact conditionals (``bmczoo.offsets.bias_link``).

    Parameters
    ----------
    a, b : float > 0
        Shape and scale of the inverse-gamma prior of both bias variances.
    row_features, col_features : None, True or bmczoo.data.Features, optional
        Features of the rows' / columns' bias means: True means the data's
        ``row_features`` / ``col_features``, a :class:`~bmczoo.data.Features` table must
        have one row per row (column) of the data; None: no features (mean 0).
    implicit : bool or {"rows", "cols"}
        Add the implicit-feedback features of the fitted pairs
        (:func:`bmczoo.data.implicit_features`) to the rows' (``"rows"``), the columns'
        (``"cols"``) or both sides' (True) bias means.
    a_w, b_w : float > 0
        Shape and rate of the Gamma prior of each side's ``lam_w``.
    """

    a: float = 1.0
    b: float = 1.0
    row_features: object = None
    col_features: object = None
    implicit: object = False
    a_w: float = 1.0
    b_w: float = 1.0
    name = "biases"

    def __post_init__(self):
        from .._checks import check_real
        from ..priors import macau

        for k in ("a", "b", "a_w", "b_w"):
            object.__setattr__(self, k, check_real(k, getattr(self, k), low=0.0, low_open=True))
        for k in ("row_features", "col_features"):
            object.__setattr__(self, k, macau.check_spec("Biases", k, getattr(self, k)))
        object.__setattr__(self, "implicit", macau.check_implicit("Biases", self.implicit))

    @property
    def linked_sides(self) -> tuple[str, ...]:
        """The sides (``"rows"``, ``"cols"``) whose bias means are linear in features."""
        imp = self.implicit
        return tuple(
            axis
            for axis, spec in (("rows", self.row_features), ("cols", self.col_features))
            if spec is not None or imp is True or imp == axis
        )

    def links(self) -> dict:
        """A description of the feature links per linked side: the explicit features
        (``"data"``, or the table's shape) and whether implicit feedback is added."""
        out = {}
        for axis, spec in (("rows", self.row_features), ("cols", self.col_features)):
            if axis in self.linked_sides:
                out[axis] = {
                    "features": "data"
                    if spec is True
                    else (None if spec is None else list(spec.features.shape)),
                    "implicit": self.implicit is True or self.implicit == axis,
                }
        return out

    def gibbs_links(self, ratings, dtype) -> dict:
        """The device arrays of the feature links for the fitted ``ratings`` (empty without
        one; ``bmczoo.offsets.bias_link.gibbs_links``).

        Parameters
        ----------
        ratings : bmczoo.data.RatingData
            The fitted ratings (their features, and their pattern for implicit feedback).
        dtype : dtype
            The float dtype of the arrays.
        """
        if not self.linked_sides:
            return {}
        from . import bias_link

        return bias_link.gibbs_links(self, ratings, dtype)

    def init_variance(self) -> float:
        """Starting value of ``s_b^2`` and ``s_c^2`` for the samplers and VB."""
        return 1.0

    def sample_variance(self, key, sumsq, m: int):
        """``s^2 | b ~ InvGamma(a + m/2, b + sumsq/2)`` (``sumsq = sum_i b_i^2``)."""
        from .. import _rng

        return _rng.inverse_gamma(key, self.a + 0.5 * m, self.b + 0.5 * sumsq, sumsq.dtype)

    # ------------------------------------------------------------------ VB
    # q(b_i) = N(b_mean_i, b_var_i), q(c_j) = N(c_mean_j, c_var_j), q(s_b^2) =
    # InvGamma(sb_shape, sb_rate), q(s_c^2) = InvGamma(sc_shape, sc_rate); state arrays
    # (C, m1) / (C, m2) (row-sharded on a mesh) and (C,) (replicated).  The sums over the
    # ratings (residual sums, counts) come from the VB engine (sparse products).

    #: q-state keys with a row axis: (C, m1) for ``b_*``, (C, m2) for ``c_*``
    VB_ROW_KEYS = {"b_mean": 0, "b_var": 0, "c_mean": 1, "c_var": 1}

    def vb_state(self, m1: int, m2: int, C: int, dtype) -> dict:
        """Zero means and variances; ``q(s^2) = InvGamma(a, a s0^2)`` with ``s0^2`` the
        :meth:`init_variance` (so ``E[1/s^2] = 1/s0^2`` at the first bias update)."""
        import jax.numpy as jnp

        s0 = self.init_variance()
        z1, z2 = jnp.zeros((C, m1), dtype), jnp.zeros((C, m2), dtype)
        sh, rt = jnp.full((C,), self.a, dtype), jnp.full((C,), self.a * s0, dtype)
        return {
            "b_mean": z1,
            "b_var": z1,
            "c_mean": z2,
            "c_var": z2,
            "sb_shape": sh,
            "sb_rate": rt,
            "sc_shape": sh,
            "sc_rate": rt,
        }

    @staticmethod
    def vb_bias_update(resid_sum, counts, tau, shape, rate, prior_mean=None):
        """Optimal ``q`` of one side's biases: ``p_i = E[1/s^2] + tau n_i``, mean ``tau *
        resid_sum_i / p_i``, variance ``1/p_i``, with ``resid_sum_i = sum_k E[R_k - (other
        bias) - M_i . N_j]`` over row i's ratings; ``tau`` (scalar or (C,)) the block
        precision, ``shape``/``rate`` (C,) the parameters of ``q(s^2)``; ``prior_mean``
        (C, m) the biases' prior means ``x_i^T E[w]`` with features (adds ``E[1/s^2]
        prior_mean_i`` to the numerator; None: zero)."""
        tau = tau if getattr(tau, "ndim", 0) == 0 else tau[:, None]
        Einv = (shape / rate)[:, None]
        p = Einv + tau * counts
        num = tau * resid_sum
        if prior_mean is not None:
            num = num + Einv * prior_mean
        return num / p, 1.0 / p

    def vb_prior_means(self, q: dict) -> tuple:
        """The biases' prior means (zero: ``(None, None)``; with features the VB core sees
        ``bmczoo.offsets.bias_link_vb.VBBiasLink``, whose means are ``X E[w]``).

        Parameters
        ----------
        q : dict
            The biases' q-state.
        """
        return None, None

    def vb_variances(self, q: dict, sums: dict, dims) -> dict:
        """``q(s_b^2)`` and ``q(s_c^2)`` (:meth:`vb_variance_update`) given the sums of
        :meth:`vb_elbo_term` and ``dims = (m1, m2)``.

        Parameters
        ----------
        q : dict
            The biases' q-state.
        sums : dict
            ``b_sq``, ``c_sq`` (and ``*_logvar``).
        dims : tuple of int
            ``(m1, m2)``.
        """
        out = {}
        for s, m in zip("bc", dims):
            out[f"s{s}_shape"], out[f"s{s}_rate"] = self.vb_variance_update(sums[f"{s}_sq"], m)
        return out

    def vb_variance_update(self, sumsq, m: int):
        """``q(s^2) = InvGamma(a + m/2, b + sumsq/2)`` with ``sumsq = sum_i E[b_i^2]`` (C,):
        returns ``(shape, rate)``."""
        import jax.numpy as jnp

        return jnp.broadcast_to(
            jnp.asarray(self.a + 0.5 * m, sumsq.dtype), sumsq.shape
        ), self.b + 0.5 * sumsq

    def vb_elbo_term(self, q: dict, m1: int, m2: int, sums: dict):
        """``E[log p(b, c | s^2)] + E[log p(s^2)] - E[log q(s^2)] + H[q(b)] + H[q(c)]`` (C,)
        at the stored q, given ``sums = {"b_sq", "b_logvar", "c_sq", "c_logvar"}``:
        ``sum_i E[b_i^2] = sum_i (mean^2 + var)`` and ``sum_i log var_i`` per side.

        Per side (``m`` biases, ``q(s^2) = InvGamma(alpha, beta)``, ``E[1/s^2] = alpha/beta``,
        ``E[log s^2] = log beta - digamma(alpha)``): the Gaussian terms and entropies give
        ``m/2 - (m/2) E[log s^2] - E[1/s^2] sum E[b^2] / 2 + (1/2) sum log var`` (the
        ``log 2 pi`` cancel); the inverse-gamma terms ``a log b - lgamma(a) - (a + 1)
        E[log s^2] - b E[1/s^2]`` minus the same with ``(alpha, beta)``."""
        import jax.numpy as jnp
        from jax.scipy.special import digamma, gammaln

        total = 0.0
        for side, m in (("b", m1), ("c", m2)):
            al, be = q[f"s{side}_shape"], q[f"s{side}_rate"]
            Einv, Elog = al / be, jnp.log(be) - digamma(al)
            gauss = (
                0.5 * m
                - 0.5 * m * Elog
                - 0.5 * Einv * sums[f"{side}_sq"]
                + 0.5 * sums[f"{side}_logvar"]
            )
            log_p = (
                self.a * math.log(self.b)
                - math.lgamma(self.a)
                - (self.a + 1.0) * Elog
                - self.b * Einv
            )
            log_q = al * jnp.log(be) - gammaln(al) - (al + 1.0) * Elog - be * Einv
            total = total + gauss + log_p - log_q
        return total

    def describe(self) -> dict:
        """The name and hyper-parameters (and, with features, ``a_w``, ``b_w`` and the
        links' description: a fit without them is described as before)."""
        out = {"name": self.name, "a": self.a, "b": self.b}
        if self.linked_sides:
            out.update(a_w=self.a_w, b_w=self.b_w, links=self.links())
        return out


def get_biases(biases) -> Biases | None:
    """``bmc.fit``'s ``biases=`` argument as a component: False/None -> None, True -> the
    default :class:`Biases`, a :class:`Biases` as given.

    Parameters
    ----------
    biases : bool, Biases or None
        The argument.
    """

    if biases is None or biases is False or biases is np.False_:
        return None
    if biases is True or biases is np.True_:
        return Biases()
    if isinstance(biases, Biases):
        return biases
    raise TypeError(f"biases must be True, False or a bmczoo.offsets.Biases, got {biases!r}")


from .base import Offset  # noqa: E402  (the components import the data layer only)
from .context import Context  # noqa: E402
