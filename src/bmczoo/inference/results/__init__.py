"""Fit results: one class per method family, plain arrays behind one typed interface.

:mod:`.base` holds :class:`FitResult` (predictions, saving through the per-class hooks
``_state_arrays`` / ``_state_from_arrays``, the abstract per-family hooks from which
:func:`.arrays.fit_arrays` builds the fit's plain arrays for ArviZ);
:mod:`.mcmc` (:class:`MCMCFit`, :class:`GibbsFit`, :class:`NUTSFit`), :mod:`.vb`
(:class:`VBFit`) and :mod:`.svi` (:class:`SVIFit`, :class:`MAPFit`) the families;
:mod:`.outputs` and :mod:`.levels` the Bayesian outputs they share; :mod:`.arrays`,
:mod:`.loglik` and :mod:`.rank` the family-free computations on a fit's arrays.
"""

from ..info import FitInfo
from .base import FitResult
from .mcmc import GibbsFit, MCMCFit, NUTSFit
from .svi import MAPFit, SVIFit
from .vb import VBFit

__all__ = [
    "FitInfo",
    "FitResult",
    "MCMCFit",
    "GibbsFit",
    "NUTSFit",
    "VBFit",
    "SVIFit",
    "MAPFit",
]
