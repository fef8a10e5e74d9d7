"""The result classes' shape: FitResult is an abstract base whose families define every
abstract hook, and the ArviZ conversion's keywords are written once (``fit_arrays``)."""

from __future__ import annotations

import inspect

import pytest

from bmczoo import diagnostics as dg
from bmczoo.inference import results
from bmczoo.inference.results import arrays

CONCRETE = [
    results.GibbsFit,
    results.NUTSFit,
    results.VBFit,
    results.SVIFit,
    results.MAPFit,
]


def test_fit_result_is_abstract():
    assert inspect.isabstract(results.FitResult)
    with pytest.raises(TypeError, match="abstract"):
        results.FitResult(info=None)


@pytest.mark.parametrize("cls", CONCRETE, ids=lambda c: c.__name__)
def test_every_family_defines_the_abstract_hooks(cls):
    assert not inspect.isabstract(cls)
    for name in results.FitResult.__abstractmethods__:
        assert getattr(cls, name) is not getattr(results.FitResult, name), name


def test_conversion_keywords_are_those_of_fit_arrays():
    # one signature: the diagnostics' fit_arrays is the results' own, to_arviz shows it
    assert dg.fit_arrays is arrays.fit_arrays
    keywords = list(inspect.signature(arrays.fit_arrays).parameters)
    assert list(inspect.signature(dg.to_arviz).parameters) == keywords
    assert keywords[1:] == [
        "var_names",
        "full",
        "entries",
        "num_draws",
        "seed",
        "log_likelihood",
        "max_draws",
        "max_ratings",
    ]
