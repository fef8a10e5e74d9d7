"""Fit results as ArviZ data: plain arrays first, converted to ArviZ only at the edge.

One path serves every fit result (``GibbsFit``, ``NUTSFit``, ``VBFit``, ``SVIFit``,
``MAPFit``) and every entry point (``fit.to_arviz``, :func:`to_arviz`, the diagnostics):
:func:`fit_arrays` (:mod:`bmczoo.inference.results.arrays`, the one place its keywords
are written) asks the result's per-family hooks for its quantities and assembles them as
a :class:`FitArrays`: numpy arrays with a leading ``(chain, draw)`` axis pair (posterior
and sample stats) or ``(chain, iteration)`` (per-iteration traces), their dimension names
and coordinates.  :func:`arrays_to_arviz` (:mod:`bmczoo._arviz`), the one converter,
turns that into an ArviZ ``InferenceData`` (ArviZ 0.x) or an ``xarray.DataTree`` (ArviZ
1.x); it is the only place that depends on the ArviZ version.

Groups and variables
--------------------
``posterior`` (chain, draw, ...), by default: the few variables one reads
    ``theta`` (entry): theta at the tracked entries, with coordinates ``row`` and ``col``
    on ``entry`` and ``"i,j"`` labels; ``gamma`` (h) where the method has it;
    ``gamma_sorted`` (h): gamma in decreasing order (the labels h are not identified: the
    posterior is invariant under permuting the columns of M, N together with gamma);
    MCMC draws of gamma: ``num_active``, the number of active columns ``sum_h P(gamma_h >
    t | draw)`` (the indicator count for drawn gamma; :func:`active_threshold` gives
    ``t``); where the factors ``M``, ``N`` of each draw are known (stored factor draws,
    or draws from q): ``theta_sv`` (h) the singular values of ``theta = M N^T``
    (decreasing), ``theta_fro`` = ``||theta||_F`` and ``eff_rank``, the entropy
    effective rank ``exp(-sum_k p_k log p_k)``, ``p = sv / sum(sv)`` (Roy and Vetterli,
    2007), a continuous rotation- and label-invariant measure of the rank of ``theta``;
    a likelihood that learns its noise: ``noise_sd`` = ``1 / sqrt(tau)`` (data scale);
    learned biases: ``bias_var`` (bias = ``row``, ``col``), the variances of the row and
    column biases; a Normal-Wishart prior (no gamma): ``cov_eig`` (side = ``M``, ``N``;
    h), the eigenvalues of ``Lambda_M^{-1}`` and ``Lambda_N^{-1}`` (the covariance of the
    rows of M and of N) in decreasing order, its analogue of sorted gamma, and
    ``mu_norm`` (side) = ``||mu_M||``, ``||mu_N||`` (both invariant under the rotations
    that leave the posterior unchanged, unlike ``mu`` and ``Lambda`` themselves); learned
    cut points of an ordinal likelihood: ``cuts`` (cut).
``posterior`` on request (``var_names=[...]``; ``full=True`` for all of them)
    Every other stored draw, as stored (:func:`extra_var_names` lists a fit's): the per-row
    and per-column biases ``row_bias`` (i), ``col_bias`` (j), the factor draws ``M``
    (i, h), ``N`` (j, h) (``store_factors``), ``tau``, ``row_bias_var``,
    ``col_bias_var`` and a Normal-Wishart state's ``mu_M`` (h), ``Lambda_M`` (h, h2),
    ``mu_N``, ``Lambda_N``.  They are left out by default because they are large (one
    value per row or column, or K x K per side) and, for the factors and the
    Normal-Wishart state, not identified (their traces and R-hat reflect rotations).
``sample_stats`` (chain, draw)
    Gibbs with test data: ``rmse`` (test RMSE of the kept draw) and ``rmse_mean`` (of
    the running posterior mean when that draw was kept); NUTS: NumPyro's extra fields
    (``diverging``, ...).
``convergence`` (chain, iteration), ``iteration = 1..T``
    Gibbs: ``rmse_draw`` and ``rmse_mean`` at every sweep (warm-up included); VB:
    ``elbo`` and ``rmse``; SVI/MAP: ``loss``.

Scale: ``theta`` is on the scale the model was fitted on (centred: the training mean,
``attrs["theta_offset"]``, is not added), as the sampler records it; the variable's own
attribute ``scale`` says so, and :func:`~bmczoo.diagnostics.summary` reports theta on the
data's scale (offset added).

Model comparison (``log_likelihood=True``, or a RatingData of entries)
--------------------------------------------------------------------
``log_likelihood`` (chain, draw, rating)
    ``y``: ``log N(y_k | theta_s[i_k, j_k] + offset, 1/tau_s)`` per rating and draw:
    ``theta`` with the biases, ``tau`` the draw's ``tau`` of a learned noise
    (:class:`~bmczoo.likelihoods.LearnedNoise`) or the fixed ``tau`` of the tempered
    likelihood.  ``az.loo``, ``az.waic`` and ``az.compare`` read it.
``posterior_predictive`` (chain, draw, rating)
    ``y``: one replicate ``theta_s + offset + e``, ``e ~ N(0, 1/tau_s)`` per draw
    (``default_rng(seed)``; unclipped), for ``az.plot_ppc``.
``observed_data`` (rating)
    ``y``: the ratings.  Coordinates ``rating`` (the position of each rating in its
    RatingData), ``rating_row``, ``rating_col``.

``True`` uses the training ratings the fit holds (``bmc.fit`` keeps them; a loaded fit
does not: pass the RatingData).  Memory is bounded by two rules: at most
``max_ratings`` ratings (default 5000), a uniform subsample without replacement drawn
with ``default_rng(seed)`` from the positions ``0..n-1`` alone, so two fits on the same
data with the same seed use the same ratings and their ``az.compare`` is valid; and at
most ``max_draws`` draws in all chains (default 1000), keeping every ``step``-th draw of
each chain, ``step = ceil(chains * draws / max_draws)`` (VB: ``min(num_draws,
max_draws)`` draws from q, one chain).  The attributes of the groups record both.
Draws of theta at the ratings come from the stored factor draws (Gibbs with
``store_factors=True``, NUTS, SVI, MAP), from the tracked entries when all the ratings
are tracked (Gibbs ``track=(rows, cols)``), or from q (VB, seeded); a Gibbs fit with
neither raises ``ValueError`` saying so.

Variational fits: the variational posterior ``q`` is represented by ``num_draws``
independent draws from ``q`` (``numpy.random.default_rng(seed)``, seed 0 by default)
forming a single chain: ``q(gamma)`` draws from the prior's own factor
(:meth:`bmczoo.priors.Prior.q_sample` on the fit's ``q_gamma``), ``theta`` at the
entries as ``M_i . N_j`` with ``M_i ~ N(m_i, V_i)``, ``N_j ~ N(n_j, W_j)`` independent
(full covariances when the fit keeps its ``state``, diagonals otherwise), and
``theta_sv`` from full draws of ``M`` and ``N``.  SVI fits use the draws
the fit already holds (one draw for MAP).
"""

from __future__ import annotations

import inspect

import numpy as np

from .. import _arviz
from .._arviz import (
    DEFAULT_VARS,
    INVARIANT_VARS,
    FitArrays,
    add_factor_quantities,
    arrays_to_arviz,
    effective_rank,
    theta_singular_values,
)
from ..inference.results.arrays import (
    active_threshold,
    default_entries,
    extra_var_names,
    fit_arrays,
    num_active_draws,
)
from ..inference.thinning import kept_iterations

__all__ = [
    "FitArrays",
    "fit_arrays",
    "to_arviz",
    "arrays_to_arviz",
    "from_numpyro",
    "theta_singular_values",
    "effective_rank",
    "extra_var_names",
    "kept_iterations",
    "default_entries",
    "active_threshold",
    "num_active_draws",
    "vb_theta_moments",
    "INVARIANT_VARS",
    "DEFAULT_VARS",
]


def to_arviz(fit, **kwargs):
    """ArviZ data for any fit (``InferenceData`` with ArviZ 0.x, ``DataTree`` with 1.x).

    By default the ``posterior`` group holds what one reads, a few small variables (see
    the module docstring): ``theta`` at the tracked entries, ``gamma``, ``gamma_sorted``
    and ``num_active`` (column-scale priors), ``cov_eig`` and ``mu_norm`` (Normal-Wishart),
    ``theta_sv``, ``theta_fro``, ``eff_rank``, ``noise_sd``, ``bias_var`` and ``cuts``,
    where the fit has them.  Per-row biases, the factor draws and full matrices come on
    request: ``var_names=["row_bias", "Lambda_M"]`` adds those stored draws
    (:func:`extra_var_names` lists them; an unknown name raises ``ValueError`` listing
    the available ones), ``full=True`` adds them all.  ``sample_stats`` (per kept draw)
    and ``convergence`` (per iteration: RMSE traces, ELBO, SVI loss); dims ``chain``,
    ``draw``, ``h``, ``entry`` (coordinates ``row``, ``col``), ``iteration``.  VB: draws
    from q with ``default_rng(seed)`` as one chain.

    ``log_likelihood=True`` (the training ratings) or a RatingData of ratings adds the
    ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups (variable
    ``y``, dim ``rating``) for ``az.loo``, ``az.waic``, ``az.compare`` and
    ``az.plot_ppc``, with at most ``max_ratings`` ratings and ``max_draws`` draws (a
    seeded subsample and a thinning; see :mod:`bmczoo.diagnostics.convert`).

    Parameters are those of :func:`fit_arrays`: ``arrays_to_arviz(fit_arrays(fit,
    **kwargs))``, as ``fit.to_arviz(**kwargs)``.
    """
    return fit.to_arviz(**kwargs)


# the keywords are fit_arrays's, written there only; help() and the API reference show them
to_arviz.__signature__ = inspect.signature(fit_arrays).replace(
    return_annotation=inspect.Signature.empty
)


def from_numpyro(mcmc, *, fit=None, **kwargs):
    """``az.from_numpyro(mcmc, log_likelihood=False)`` plus the invariant quantities.

    For an ``MCMC`` run directly with :class:`~bmczoo.inference.ConjugateGibbs` or NUTS on
    :func:`bmczoo.models.matrix_completion`: ArviZ's conversion (all sampled sites, its
    own dims; ``InferenceData`` with ArviZ 0.x, ``DataTree`` with 1.x) to which
    ``gamma_sorted`` and, when ``M`` and ``N`` were collected, ``theta_sv``,
    ``theta_fro`` and ``eff_rank`` are added in the posterior.
    """
    kwargs.setdefault("log_likelihood", False)
    data = _arviz.from_numpyro(mcmc, **kwargs)
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    post = _arviz.group(data)
    K = None
    if "gamma" in samples:
        g = samples["gamma"]
        K = g.shape[-1]
        post["gamma_sorted"] = (("chain", "draw", "h"), -np.sort(-g, axis=-1))
    if "M" in samples and "N" in samples:
        sv = theta_singular_values(samples["M"], samples["N"])
        K = sv.shape[-1]
        quantities: dict = {}
        add_factor_quantities(quantities, sv)  # theta_sv (h), theta_fro, eff_rank
        for name, value in quantities.items():
            post[name] = (("chain", "draw", "h")[: np.ndim(value)], value)
    if K is not None:
        post = post.assign_coords(h=np.arange(K))
    return _arviz.replace_group(data, "posterior", post)


def vb_theta_moments(fit, rows, cols) -> tuple[np.ndarray, np.ndarray, bool]:
    """Mean and variance of ``theta_ij = M_i^T N_j`` under the mean-field q of a VB fit
    (model scale): mean ``m_i^T n_j``, variance ``m_i^T W_j m_i + n_j^T V_i n_j +
    tr(V_i W_j)`` (full covariances when the fit keeps its state; with diagonals only,
    ``sum_h m_ih^2 W_jhh + n_jh^2 V_ihh + V_ihh W_jhh``).  Returns (mean, var, full).

    Parameters
    ----------
    fit : VBFit
        A variational fit.
    rows, cols : array_like of int, shape (P,)
        The entries.
    """
    return fit._product_moments(rows, cols)
