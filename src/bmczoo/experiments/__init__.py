"""The paper's experiments as code (reference numbers and the simulation study)."""

from .paper import PAPER_TABLE2, PAPER_TABLE3_HYPER, paper_prior
from .simulation import SimulationCell, run_simulation_cell

__all__ = ["PAPER_TABLE2", "PAPER_TABLE3_HYPER", "paper_prior", "SimulationCell", "run_simulation_cell"]
