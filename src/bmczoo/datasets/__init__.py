"""Datasets: the paper's simulator and MovieLens loaders."""
