"""Inference: settings objects, their drivers, and the result classes.

``bmc.fit`` (:mod:`.fit`) is the front door; :mod:`.settings` holds one validated settings
class per method (:class:`Gibbs`, :class:`VB`, :class:`NUTS`, :class:`SVI`, :class:`MAP`);
:mod:`.results` the result classes; :mod:`.gibbs`, :mod:`.vb`, :mod:`.tensor` (N-way
arrays) the
functional cores (over the hot path, :mod:`bmczoo.linalg`) (pure ``init``/``step`` over typed states) and :class:`ConjugateGibbs`
the NumPyro ``MCMCKernel`` around the Gibbs core.
"""

from . import gibbs, tensor, vb
from .fit import fit
from .gibbs import ConjugateGibbs, ConjugateGibbsState
from .results import FitInfo, FitResult, GibbsFit, MAPFit, MCMCFit, NUTSFit, SVIFit, VBFit
from .errors import SettingsError
from .settings import MAP, NUTS, SVI, VB, Gibbs, Settings
from .tensor.fit import TensorFit

__all__ = [
    "gibbs",
    "tensor",
    "vb",
    "fit",
    "ConjugateGibbs",
    "ConjugateGibbsState",
    "FitInfo",
    "FitResult",
    "MCMCFit",
    "GibbsFit",
    "NUTSFit",
    "VBFit",
    "SVIFit",
    "MAPFit",
    "TensorFit",
    "Settings",
    "SettingsError",
    "Gibbs",
    "VB",
    "NUTS",
    "SVI",
    "MAP",
]
