"""Bayesian CP factorisation of N-way arrays with the paper's priors (issue 56's first
step): :mod:`.core` holds the Gibbs sweep (pure functions over a
:class:`~bmczoo.inference.tensor.core.TensorState`), :mod:`.fit` the driver and its
result (:func:`fit_tensor`, :class:`TensorFit`)."""

from .core import TensorProblem, TensorState, build_problem, init, mode_conditional, sweep, theta_at

__all__ = [
    "TensorProblem",
    "TensorState",
    "build_problem",
    "init",
    "mode_conditional",
    "sweep",
    "theta_at",
]
