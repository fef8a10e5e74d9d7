"""The paper's experiments as code: reference numbers, the simulation study and the
MovieLens table, resumable per fit and with hyper-parameters chosen on validation data."""

from .paper import (
    PAPER_TABLE2,
    PAPER_TABLE3_HYPER,
    PAPER_TABLE4,
    PAPER_TABLE5_HYPER,
    PAPER_TABLE6,
    make_prior,
    paper_prior,
)
from .runner import EXPERIMENTS, Result, default_out, format_table, run_experiment
from .simulation import SimulationCell, run_simulation_cell

__all__ = [
    "PAPER_TABLE2", "PAPER_TABLE3_HYPER", "PAPER_TABLE4", "PAPER_TABLE5_HYPER", "PAPER_TABLE6",
    "make_prior", "paper_prior", "EXPERIMENTS", "Result", "default_out", "format_table", "run_experiment",
    "SimulationCell", "run_simulation_cell",
]
