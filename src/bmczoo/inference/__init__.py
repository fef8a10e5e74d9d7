"""Inference: the conjugate Gibbs sampler (functional core + NumPyro kernel) and ``fit``."""

from . import gibbs, kernels
from .fit import GibbsFit, fit
from .numpyro_kernel import ConjugateGibbs, ConjugateGibbsState

__all__ = ["gibbs", "kernels", "fit", "GibbsFit", "ConjugateGibbs", "ConjugateGibbsState"]
