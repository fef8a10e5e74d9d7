"""One cell of the paper's simulation study, through the same fits as ``bmczoo reproduce``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from ..priors import Prior
from .execute import fit_value
from .runner import GridCell, base_test_task, plan_grid
from .tasks import FULL, Settings

__all__ = ["SimulationCell", "run_simulation_cell"]


@dataclasses.dataclass(frozen=True)
class SimulationCell:
    """RMSE of the posterior mean over all ``m^2`` entries, one per simulated dataset."""

    m: int
    K: int
    prior: str
    factor_scale: str
    seeds: tuple[int, ...]
    rmse: tuple[float, ...]

    @property
    def mean(self) -> float:
        """Mean RMSE over the datasets."""
        return float(np.mean(self.rmse))

    @property
    def se(self) -> float:
        """Standard error of the mean (NaN with one dataset)."""
        return (
            float(np.std(self.rmse, ddof=1) / np.sqrt(len(self.rmse)))
            if len(self.rmse) > 1
            else float("nan")
        )


def run_simulation_cell(
    m: int,
    K: int,
    prior: Prior,
    *,
    factor_scale: str = "variance",
    seeds: Iterable[int] = (0, 1, 2, 3),
    num_warmup: int = 100,
    num_samples: int = 900,
    thinning: int = 10,
    progress_bar: bool = False,
    column_moves: bool = True,
) -> SimulationCell:
    """The test-stage fits of ``bmczoo reproduce`` for one prior, without selection.

    For each dataset seed ``s`` (which also seeds the sampler): simulate the paper's
    ``m x m`` matrix, fit all its training data by Gibbs with ``prior``'s
    hyper-parameters from the prior's default start (the first of its
    :meth:`~bmczoo.priors.Prior.gibbs_starts`), exactly as the experiments' test fits do
    (centred data, the noise variance estimated), and take the RMSE of the posterior mean
    against the true ``theta`` over all ``m^2`` entries.  Nothing is cached.

    Parameters
    ----------
    m, K : int
        Matrix size and latent dimension.
    prior : Prior
        A registered prior (rebuilt from its name and hyper-parameters).
    factor_scale : {"variance", "sd"}
        How the simulator reads the paper's ``N(0, 20/sqrt(m))``.
    seeds : iterable of int
        Dataset (and sampler) seeds.
    num_warmup, num_samples, thinning : int
        The Gibbs chains (the paper: 100, 900, 10).
    progress_bar : bool
        The sampler's progress bar.
    column_moves : bool
        The column moves (at the end of every sweep) for the priors that have one; False:
        the paper's plain sweep.

    Returns
    -------
    SimulationCell
    """
    seeds = tuple(int(s) for s in seeds)
    settings = Settings(
        seeds, num_warmup, num_samples, thinning, FULL.vb_max_iter, column_moves=column_moves
    )
    cell = GridCell("", m, K, prior.name, prior.hyperparameters(), factor_scale=factor_scale)
    (row,) = plan_grid([cell], settings=settings, experiment="simulation-cell")
    rmse = tuple(fit_value(base_test_task(unit), progress_bar=progress_bar) for unit in row.units)
    return SimulationCell(m, K, prior.name, factor_scale, seeds, rmse)
