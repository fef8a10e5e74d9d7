"""bmczoo: a model zoo for Bayesian low-rank matrix completion on NumPyro + JAX.

Implements "Bayesian matrix completion: prior specification" (Alquier, Cottet, Chopin,
Rousseau): the fixed, inverse-gamma, gamma and discrete (spike-and-slab) priors, fast
conjugate Gibbs kernels, closed-form VB, NumPyro SVI/NUTS baselines, ArviZ diagnostics.
"""

from . import data, datasets, diagnostics, evaluation, inference, likelihoods, models, offsets, priors
from .data import RatingData
from .inference import fit
from .inference.saving import load
from ._cache import enable_compilation_cache

__version__ = "0.1.0"

__all__ = ["RatingData", "fit", "load", "enable_compilation_cache", "evaluation", "data", "datasets", "diagnostics", "inference", "likelihoods", "models", "offsets", "priors", "__version__"]
