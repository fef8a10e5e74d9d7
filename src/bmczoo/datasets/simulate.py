"""The paper's simulation design (Section "Simulations").

``theta0 = M0 N0^T`` with ``M0``, ``N0`` of shape ``(m, rank)`` and iid entries
``N(0, 20/sqrt(m))``; ``n = round(frac * m^2)`` entries are observed, chosen uniformly
without replacement, each with additive ``N(0, noise_sd^2)`` noise.  Performance is the
RMSE over *all* ``m^2`` entries, ``||theta_hat - theta0||_F / m``.

The paper does not say whether ``20/sqrt(m)`` is the variance or the standard deviation
of the factor entries; both readings are available through ``factor_scale``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Literal

import numpy as np

from ..data import RatingData

__all__ = ["Simulation", "simulate_paper"]

FactorScale = Literal["variance", "sd"]

#: Target number of matrix entries evaluated at once by :meth:`Simulation.rmse`.
_RMSE_CHUNK_ENTRIES = 1 << 20


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Simulation:
    """One draw of the paper's simulation design.

    Attributes
    ----------
    train : RatingData
        The ``n`` observed noisy entries, sorted row-major (by row, then column).
    M0 : numpy.ndarray
        ``(m1, rank)`` true left factor (read-only).
    N0 : numpy.ndarray
        ``(m2, rank)`` true right factor (read-only).
    noise_sd : float
        Standard deviation of the observation noise.
    factor_scale : {"variance", "sd"}
        How ``20/sqrt(m)`` was read: as the variance or as the standard deviation of the
        entries of ``M0`` and ``N0``.
    factor_sd : float
        The resulting standard deviation of those entries.
    frac : float
        Requested fraction of observed entries.
    theta : numpy.ndarray
        ``M0 @ N0.T``, the true ``(m1, m2)`` float64 matrix (read-only; computed on first
        access, so large designs need not materialise it).
    """

    train: RatingData
    M0: np.ndarray = field(repr=False)
    N0: np.ndarray = field(repr=False)
    noise_sd: float
    factor_scale: str
    factor_sd: float
    frac: float

    @cached_property
    def theta(self) -> np.ndarray:
        """The true ``(m1, m2)`` matrix ``M0 @ N0.T`` (float64, read-only)."""
        return _readonly(self.M0 @ self.N0.T)

    @property
    def shape(self) -> tuple[int, int]:
        """``(m1, m2)``."""
        return self.train.shape

    @property
    def rank(self) -> int:
        """Rank of the true matrix (number of columns of ``M0``)."""
        return int(self.M0.shape[1])

    def _truth(self, start: int, stop: int) -> np.ndarray:
        if "theta" in self.__dict__:  # already materialised: use it (exact)
            return self.theta[start:stop]
        return self.M0[start:stop] @ self.N0.T

    def rmse(
        self,
        estimate: np.ndarray | Callable[[np.ndarray, np.ndarray], Any] | Any,
        *,
        chunk_entries: int = _RMSE_CHUNK_ENTRIES,
    ) -> float:
        """RMSE of an estimate over all ``m1 * m2`` entries, as in the paper.

        ``sqrt(sum_ij (theta_hat_ij - theta0_ij)^2 / (m1 m2))``, computed over blocks of
        whole rows so that neither the estimate nor ``theta0`` need be held in full.

        Parameters
        ----------
        estimate : array_like, callable, or object with a ``predict`` method
            Either the full ``(m1, m2)`` estimate, or ``predict(rows, cols)`` returning
            the estimates at the given 0-based int32 indices as a 1-D array (e.g. a fit's
            ``predict`` method, or the fit itself).
        chunk_entries : int
            Approximate number of entries evaluated per call of ``predict``.

        Returns
        -------
        float

        Raises
        ------
        ValueError
            If the array has the wrong shape, ``predict`` returns the wrong number of
            values, or an estimate is not finite.
        """
        m1, m2 = self.shape
        predict = getattr(estimate, "predict", None)
        if not callable(predict):
            predict = estimate if callable(estimate) else None
        full = None
        if predict is None:
            full = np.asarray(estimate)
            if full.shape != (m1, m2):
                raise ValueError(f"estimate must have shape ({m1}, {m2}), got {full.shape}")
        if (
            isinstance(chunk_entries, bool)
            or not isinstance(chunk_entries, numbers.Integral)
            or chunk_entries < 1
        ):
            raise ValueError(f"chunk_entries must be a positive integer, got {chunk_entries!r}")
        step = max(1, int(chunk_entries) // m2)
        all_cols = np.arange(m2, dtype=np.int32)
        sse = 0.0
        for start in range(0, m1, step):
            stop = min(m1, start + step)
            if full is not None:
                est = np.asarray(full[start:stop], dtype=np.float64)
            else:
                rows = np.repeat(np.arange(start, stop, dtype=np.int32), m2)
                cols = np.tile(all_cols, stop - start)
                est = np.asarray(predict(rows, cols), dtype=np.float64)
                if est.shape != rows.shape:
                    raise ValueError(
                        f"predict(rows, cols) must return one value per entry, shape {rows.shape}; "
                        f"got shape {est.shape}"
                    )
                est = est.reshape(stop - start, m2)
            if not np.isfinite(est).all():
                i, j = np.argwhere(~np.isfinite(est))[0]
                raise ValueError(f"estimate is not finite at entry ({start + int(i)}, {int(j)})")
            sse += float(np.sum((est - self._truth(start, stop)) ** 2))
        return math.sqrt(sse / (m1 * m2))

    def __repr__(self) -> str:
        m1, m2 = self.shape
        return (
            f"Simulation(shape=({m1}, {m2}), rank={self.rank}, n={self.train.n}, "
            f"noise_sd={self.noise_sd}, factor_scale={self.factor_scale!r}, "
            f"factor_sd={self.factor_sd:.4g})"
        )


def _positive_int(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _real(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _check_shape(m, m2, rank) -> tuple[int, int, int]:
    """``(m1, m2, rank)`` as positive ints (``m2`` defaults to ``m``), ``rank <= min(m1, m2)``."""
    m1 = _positive_int("m", m)
    m2_ = m1 if m2 is None else _positive_int("m2", m2)
    rank = _positive_int("rank", rank)
    if rank > min(m1, m2_):
        raise ValueError(f"rank={rank} exceeds min(m, m2) = {min(m1, m2_)}")
    return m1, m2_, rank


def _observed_count(frac, m1: int, m2: int) -> tuple[float, int]:
    """``frac`` as a float in (0, 1] and the number ``round(frac * m1 * m2)`` (>= 1) of
    observed entries."""
    frac_f = _real("frac", frac)
    if not 0.0 < frac_f <= 1.0:
        raise ValueError(f"frac must be in (0, 1], got {frac!r}")
    n = int(round(frac_f * m1 * m2))
    if n < 1:
        raise ValueError(f"frac={frac!r} observes no entry of a {m1} x {m2} matrix")
    return frac_f, min(n, m1 * m2)


def _factor_sd(factor_scale, m1: int) -> float:
    """Standard deviation of the entries of ``M0``, ``N0``: ``sqrt(20/sqrt(m1))``
    (``"variance"``) or ``20/sqrt(m1)`` (``"sd"``)."""
    if factor_scale == "variance":
        return math.sqrt(20.0 / math.sqrt(m1))
    if factor_scale == "sd":
        return 20.0 / math.sqrt(m1)
    raise ValueError(f"factor_scale must be 'variance' or 'sd', got {factor_scale!r}")


def _draw(
    rng: np.random.Generator,
    shape: tuple[int, int],
    rank: int,
    n: int,
    factor_sd: float,
    noise_sd: float,
) -> tuple[np.ndarray, np.ndarray, RatingData]:
    """Draw, in this order, ``M0``, ``N0``, ``n`` observed positions (uniform without
    replacement, row-major) and their noise; returns ``(M0, N0, train)``."""
    m1, m2 = shape
    M0 = rng.normal(0.0, factor_sd, size=(m1, rank))
    N0 = rng.normal(0.0, factor_sd, size=(m2, rank))
    flat = np.sort(rng.choice(m1 * m2, size=n, replace=False))
    noise = rng.normal(0.0, noise_sd, size=n)
    rows, cols = np.divmod(flat, m2)
    values = np.einsum("kr,kr->k", M0[rows], N0[cols]) + noise
    return M0, N0, RatingData(rows, cols, values, (m1, m2))


def simulate_paper(
    m: int,
    rank: int = 2,
    frac: float = 0.2,
    noise_sd: float = 1.0,
    factor_scale: FactorScale = "variance",
    seed: int | np.random.SeedSequence | np.random.Generator | None = 0,
    *,
    m2: int | None = None,
) -> Simulation:
    """Draw one data set of the paper's simulation study.

    ``theta0 = M0 @ N0.T`` with ``M0`` (``m x rank``) and ``N0`` (``m2 x rank``) having
    iid ``N(0, 20/sqrt(m))`` entries; ``n = round(frac * m * m2)`` entries are chosen
    uniformly without replacement and observed with ``N(0, noise_sd^2)`` noise.

    Parameters
    ----------
    m : int
        Number of rows (the paper's ``m``; it also sets the factor scale ``20/sqrt(m)``).
    rank : int
        Rank of ``theta0`` (the paper: 2); at most ``min(m, m2)``.
    frac : float
        Fraction of observed entries, in ``(0, 1]`` (the paper: 0.2).
    noise_sd : float
        Standard deviation of the noise, ``>= 0`` (the paper: 1).
    factor_scale : {"variance", "sd"}
        ``"variance"``: the entries of ``M0``, ``N0`` have variance ``20/sqrt(m)``
        (standard deviation ``sqrt(20/sqrt(m))``); ``"sd"``: they have standard deviation
        ``20/sqrt(m)``.  The paper's ``N(0, 20/sqrt(m))`` is ambiguous; the default reads
        the second parameter of ``N`` as a variance, the usual convention.
    seed : int, SeedSequence, Generator or None
        Passed to :func:`numpy.random.default_rng`.  The draws are, in order: ``M0``,
        ``N0``, the observed positions, the noise.
    m2 : int, optional
        Number of columns; default ``m`` (square, as in the paper).  The factor scale
        still uses ``m``.

    Returns
    -------
    Simulation
        ``.train`` (observed noisy entries, row-major), ``.theta``, ``.M0``, ``.N0``,
        ``.rmse(estimate)``, ...

    Raises
    ------
    ValueError
        For a non-positive or non-integer ``m``, ``m2`` or ``rank``, ``rank > min(m, m2)``,
        ``frac`` outside ``(0, 1]`` or giving no observation, a negative or non-finite
        ``noise_sd``, or an unknown ``factor_scale``.

    Examples
    --------
    >>> sim = simulate_paper(100, seed=1)
    >>> sim.train.n, sim.theta.shape
    (2000, (100, 100))
    >>> sim.rmse(sim.theta)
    0.0
    """
    m1, m2_, rank = _check_shape(m, m2, rank)
    frac_f, n = _observed_count(frac, m1, m2_)
    sd_noise = _real("noise_sd", noise_sd)
    if sd_noise < 0:
        raise ValueError(f"noise_sd must be >= 0, got {noise_sd!r}")
    factor_sd = _factor_sd(factor_scale, m1)
    M0, N0, train = _draw(np.random.default_rng(seed), (m1, m2_), rank, n, factor_sd, sd_noise)
    return Simulation(
        train=train,
        M0=_readonly(M0),
        N0=_readonly(N0),
        noise_sd=sd_noise,
        factor_scale=factor_scale,
        factor_sd=factor_sd,
        frac=frac_f,
    )
