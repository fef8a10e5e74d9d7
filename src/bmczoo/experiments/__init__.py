"""The paper's experiments as code: reference numbers, the simulation study and the
MovieLens table (with rows beyond the paper, :mod:`.beyond`), resumable per fit and with
hyper-parameters chosen on validation data.

The work is described by frozen values (:mod:`.tasks`), run with a per-fit cache
(:mod:`.execute`) and selected and summarised by pure functions (:mod:`.runner`)."""

from .beyond import MOVIELENS_BEYOND, MOVIELENS_LINKED
from .execute import run
from .paper import (
    PAPER_TABLE2,
    PAPER_TABLE3_HYPER,
    PAPER_TABLE4,
    PAPER_TABLE5_HYPER,
    PAPER_TABLE6,
    paper_prior,
)
from .runner import (
    EXPERIMENTS,
    GridCell,
    Result,
    default_out,
    format_table,
    plan_grid,
    run_experiment,
    run_grid,
    select,
    summarise,
)
from .simulation import SimulationCell, run_simulation_cell
from .tasks import FULL, QUICK, FitTask, Settings, Unit, plan_unit

__all__ = [
    "PAPER_TABLE2",
    "PAPER_TABLE3_HYPER",
    "PAPER_TABLE4",
    "PAPER_TABLE5_HYPER",
    "PAPER_TABLE6",
    "paper_prior",
    "MOVIELENS_BEYOND",
    "MOVIELENS_LINKED",
    "EXPERIMENTS",
    "Result",
    "default_out",
    "format_table",
    "run_experiment",
    "GridCell",
    "Settings",
    "QUICK",
    "FULL",
    "FitTask",
    "Unit",
    "plan_unit",
    "plan_grid",
    "run",
    "select",
    "summarise",
    "run_grid",
    "SimulationCell",
    "run_simulation_cell",
]
