"""ArviZ conversion, convergence diagnostics and the paper's figures.

Conversion (arrays first, ArviZ at the edge)::

    idata = bmc.diagnostics.to_arviz(fit)        # any fit: Gibbs, NUTS, VB, SVI, MAP (small default)
    bmc.diagnostics.to_arviz(fit, var_names=["row_bias"])  # stored draws on request (full=True: all)
    bmc.diagnostics.summary(fit)                 # ESS bulk/tail, R-hat, MCSE (az.summary)
    bmc.diagnostics.rank_posterior(fit, 0.2)     # P(#{h: gamma_h > 0.2} = r), r = 0..K
    bmc.diagnostics.theta_rank_posterior(fit)    # P(effective rank of theta = r), any prior
    bmc.diagnostics.rank_mixing(fit)             # ESS, R-hat, chain modes of the active-column count
    bmc.diagnostics.loo(fit)                     # PSIS-LOO (az.loo) of the training ratings
    bmc.diagnostics.compare({"a": fit_a, "b": fit_b})  # az.compare by PSIS-LOO

Figures (each returns a matplotlib ``Figure``)::

    plot_rmse_trace(fit)                         # Fig. 1: RMSE by iteration
    plot_acf(fit)                                # Fig. 2: ACF of tracked theta entries
    plot_trace(fit)                              # az.plot_trace of invariant quantities
    plot_posterior_compare(gibbs_fit, vb_fit)    # Fig. 3: Gibbs vs VB densities
    plot_convergence({"100K": vb1, "1M": vb2})   # Fig. 4: VB convergence
    plot_gamma(fit)                              # sorted gamma and the rank posterior
    plot_ppc(fit)                                # posterior predictive check (az.plot_ppc)
    report(fit, "out/")                          # figures + summary table (PNG/CSV/Markdown)

Diagnostics use rotation- and label-invariant quantities only (theta entries, sorted
gamma, ``||theta||_F``, effective rank): ``M``, ``N`` and each ``gamma_h`` are not
identified.  See :mod:`bmczoo.diagnostics.convert` for the groups and variables.

Everything here works under ArviZ 0.x (``InferenceData``) and 1.x (``xarray.DataTree``,
arviz-stats, arviz-plots) alike: :mod:`bmczoo._arviz` is the one place that knows the
difference.
"""

from .convert import (
    INVARIANT_VARS,
    FitArrays,
    arrays_to_arviz,
    effective_rank,
    extra_var_names,
    fit_arrays,
    from_numpyro,
    kept_iterations,
    theta_singular_values,
    to_arviz,
    vb_theta_moments,
)
from .plots import (
    plot_acf,
    plot_convergence,
    plot_gamma,
    plot_posterior_compare,
    plot_ppc,
    plot_rmse_trace,
    plot_trace,
)
from .report import report
from .stats import (
    RankMixingWarning,
    autocorrelation,
    compare,
    gamma_threshold,
    loo,
    prob_gamma_above,
    rank_mixing,
    rank_posterior,
    summary,
    theta_rank_posterior,
    theta_sv_draws,
)

__all__ = [
    "INVARIANT_VARS",
    "FitArrays",
    "arrays_to_arviz",
    "autocorrelation",
    "compare",
    "effective_rank",
    "extra_var_names",
    "fit_arrays",
    "from_numpyro",
    "gamma_threshold",
    "kept_iterations",
    "loo",
    "plot_acf",
    "plot_convergence",
    "plot_gamma",
    "plot_posterior_compare",
    "plot_ppc",
    "plot_rmse_trace",
    "plot_trace",
    "prob_gamma_above",
    "rank_mixing",
    "rank_posterior",
    "RankMixingWarning",
    "report",
    "summary",
    "theta_rank_posterior",
    "theta_singular_values",
    "theta_sv_draws",
    "to_arviz",
    "vb_theta_moments",
]
