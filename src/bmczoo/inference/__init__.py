"""Inference: the conjugate Gibbs sampler (functional core + NumPyro kernel), closed-form VB, and ``fit``."""

from . import gibbs, kernels, vb
from .fit import GibbsFit, SVIFit, VBFit, fit
from .numpyro_kernel import ConjugateGibbs, ConjugateGibbsState

__all__ = ["gibbs", "kernels", "vb", "fit", "GibbsFit", "VBFit", "SVIFit", "ConjugateGibbs", "ConjugateGibbsState"]
