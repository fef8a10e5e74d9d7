"""Conjugate blocked Gibbs sampler for every prior of the zoo.

Functional core in the BlackJAX style: :func:`build_problem` prepares the device data
once, :func:`init` and :func:`step` are pure functions over the typed
:class:`GibbsState`; :class:`ConjugateGibbs` wraps them in a NumPyro ``MCMCKernel``.

One sweep (docs/algorithms.md, "The Gibbs blocks"): all rows of ``M`` given ``N, gamma``
(one batched Cholesky), all rows of ``N`` given ``M, gamma``, then ``gamma`` from the
prior's exact conditional given ``S_h = ||M_h||^2 + ||N_h||^2``.  Chains live on a leading
axis and are advanced together (their sparse products stacked as extra dense columns);
chain ``c`` uses its own key, so chain ``c`` of a vectorised run equals a single-chain run
with that key.  With ``overrelax = rho != 0`` the rows are updated by Adler's
over-relaxation within the same exact Gaussian conditionals (still invariant for the
posterior; ``benchmarks/bench_overrelax.py`` measures its effective sample size).

While sampling, the state's accumulators (``state.stats``, :class:`RunStats`, apart from
the chain's variables) hold, without storing draws: the sum of ``theta`` at
requested entries over kept draws (the posterior mean) and of its square (the posterior
variance), and, when test values are given, the RMSE per iteration of the current draw
and of the running posterior mean.

Optional moves at the end of a sweep: the column moves (:func:`column_moves`;
docs/algorithms.md, "Column moves"; or inside it, :func:`fused_moves`) and, for the
discrete prior, the annealed spike/slab switch (:func:`annealed_switch`, every
``anneal_every`` sweeps).

The modules, by role: :mod:`.state` (the problem, the state, :func:`init`),
:mod:`.rows` (the factor blocks), :mod:`.columns` (the column moves), :mod:`.anneal`
(the annealed switch), :mod:`.latent` (a latent likelihood's block), :mod:`.sampler`
(:func:`sweep`, :func:`step`), :mod:`.kernel` (:class:`ConjugateGibbs`) and :mod:`.driver`
(``bmc.fit``'s Gibbs driver: the chains run by the run loop, their checkpoint arrays).
"""

from .anneal import annealed_path, annealed_switch
from .columns import column_log_marginal, column_moves, fused_moves
from .kernel import ConjugateGibbs, ConjugateGibbsState
from .latent import latent_block, latent_cuts, level_probs, ratings_theta
from .sampler import check_failure, is_kept, step, sweep
from .state import (
    Entries,
    EntryArrays,
    GibbsProblem,
    GibbsState,
    RunStats,
    Schedule,
    build_problem,
    draws,
    entries,
    factors,
    init,
    place,
    theta_at,
)

__all__ = [
    "GibbsProblem",
    "GibbsState",
    "RunStats",
    "Entries",
    "EntryArrays",
    "Schedule",
    "build_problem",
    "init",
    "step",
    "sweep",
    "place",
    "theta_at",
    "entries",
    "check_failure",
    "is_kept",
    "factors",
    "draws",
    "column_moves",
    "fused_moves",
    "column_log_marginal",
    "annealed_switch",
    "annealed_path",
    "latent_block",
    "latent_cuts",
    "level_probs",
    "ratings_theta",
    "ConjugateGibbs",
    "ConjugateGibbsState",
]
