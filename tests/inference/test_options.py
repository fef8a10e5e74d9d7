"""Each option declared once (:mod:`bmczoo.inference.options`): the settings fields are the
single source of the documentation, the command line, the checkpoint's record and the
experiments' sampler; a sweep option added as one field reaches all of them."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import bmczoo
from _package_copy import copy_package, run_side_by_side
from bmczoo.inference import options as opts
from bmczoo.inference import settings as st


@pytest.mark.parametrize("method", sorted(st.SETTINGS))
def test_every_field_is_declared_with_its_option_and_documented(method):
    cls = st.SETTINGS[method]
    declared = opts.options_of(cls)
    assert set(declared) == {f.name for f in dataclasses.fields(cls)}
    params = cls.__doc__.split("Parameters\n----------\n", 1)[1]
    for name, opt in declared.items():
        assert f"\n{name} : {opt.type}\n" in "\n" + params, (method, name)


def test_shared_fields_are_one_declaration():
    """A field several methods take is one field object of a shared base class (its doc and
    flag cannot drift apart between the methods)."""
    seen = {}
    for cls in st.SETTINGS.values():
        for f in dataclasses.fields(cls):
            seen.setdefault(f.name, set()).add(id(f.metadata["option"]))
    assert all(len(ids) == 1 for ids in seen.values()), seen
    gibbs, sweep = ({f.name: f for f in dataclasses.fields(c)} for c in (st.Gibbs, st.SweepOptions))
    assert gibbs["overrelax"].metadata["option"] is sweep["overrelax"].metadata["option"]


def test_record_leaves_out_the_values_before_an_option():
    """A checkpoint records an option unless it is at its ``before`` value or the option it
    needs is off: the record of the sampler of earlier checkpoints is what it was."""
    s = st.Gibbs(column_moves=False, gamma_sampler="jax", row_draw="two-solves", thinning=1)
    assert opts.record(s) == dict(
        num_warmup=100, num_samples=900, thinning=1, num_chains=4, overrelax=0.0
    )
    s = st.Gibbs(column_moves=True, column_moves_every=3, fuse_column_moves=False, anneal_steps=2)
    rec = opts.record(s)
    assert rec["column_moves"] is True and rec["column_moves_every"] == 3
    assert "fuse_column_moves" not in rec  # at its before value
    assert rec["anneal_steps"] == 2 and rec["anneal_every"] == 50
    assert rec["gamma_sampler"] == "one-hash" and rec["row_draw"] == "bordered"
    assert opts.before_values(st.SweepOptions) == dict(
        column_moves=False,
        column_moves_every=1,
        fuse_column_moves=False,
        anneal_steps=0,
        gamma_sampler="jax",
        row_draw="two-solves",
    )


def test_flag_help_names_each_method_and_its_default():
    flags = opts.flags(st.SETTINGS)
    chains = flags["num_chains"]
    assert chains.flag == "--chains" and chains.help.startswith("gibbs/nuts: ")
    assert "(default 4); vb: " in chains.help and chains.help.endswith("(default 1)")
    assert flags["fuse_column_moves"].kind == "switch"
    assert flags["store_factors"].spell(True) == "--store-factors yes"
    assert flags["column_moves"].spell(False) == "--no-column-moves"
    assert "Prior" not in flags["column_moves_every"].help  # reST roles made plain


def test_conjugate_gibbs_takes_the_sweep_options_by_name():
    kernel = bmczoo.inference.ConjugateGibbs(overrelax=-0.5, row_draw="two-solves")
    assert kernel._options == st.SweepOptions(overrelax=-0.5, row_draw="two-solves")
    with pytest.raises(TypeError, match="row_draws.*row_draw"):
        bmczoo.inference.ConjugateGibbs(row_draws="bordered")


# ----------------------------------------------------------------------------- a dummy option
FIELD = """
    probe_option: int = option(
        3,
        "int",
        "A probe option of the sweep (tests/inference/test_options.py).",
        flag=True,
        metavar="P",
        group=INTERNALS_GROUP,
    )
"""

CHECKS = textwrap.dedent(
    """
    import sys
    import numpy as np
    import bmczoo as bmc

    assert bmc.__file__.startswith(sys.argv[1]), bmc.__file__
    assert "probe_option : int" in bmc.inference.Gibbs.__doc__
    assert "probe_option : int" in bmc.inference.settings.SweepOptions.__doc__
    assert bmc.inference.ConjugateGibbs(probe_option=5)._options.probe_option == 5
    train = bmc.datasets.simulate_paper(20, seed=0).train
    fit = bmc.fit(train, 2, num_warmup=2, num_samples=2, thinning=1, num_chains=1,
                  probe_option=6, progress_bar=False)
    assert fit.info.settings.probe_option == 6
    assert fit.info.as_dict()["probe_option"] == 6
    print("ok")
    """
)


def _add_field(pkg: Path) -> None:
    path = pkg / "inference" / "settings.py"
    text = path.read_text()
    anchor = "\n    def _check_sweep(self) -> None:"
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, FIELD + anchor))


def test_a_sweep_option_added_as_one_field_reaches_every_consumer(tmp_path):
    """A copy of the package whose only change is one field in the sweep's declarations:
    ``bmc.fit``, ``Gibbs``, ``ConjugateGibbs``, the docs, ``bmczoo fit --help``, the flag,
    the fit's info and the checkpoint's settings record all have it."""
    dst, changed = copy_package(tmp_path, _add_field)
    assert changed == {Path("inference/settings.py")}  # the field, nothing else
    fit = [sys.executable, "-m", "bmczoo", "fit", "--data", "sim:20", "-K", "2", "--quiet"]
    fit += ["--num-warmup", "2", "--num-samples", "2", "--thinning", "1", "--chains", "1"]
    fit += ["--probe-option", "7", "--checkpoint", str(tmp_path / "ck.npz")]
    runs = {
        "python": [sys.executable, "-c", CHECKS, str(dst)],
        "help": [sys.executable, "-m", "bmczoo", "fit", "--help"],
        "cli": fit,
    }
    outs = run_side_by_side(runs, tmp_path)
    assert outs["python"].strip().endswith("ok")
    help_text = " ".join(outs["help"].split())
    internals = help_text.split("Gibbs sampler internals", 1)[1]
    assert "--probe-option P gibbs: A probe option of the sweep" in internals
    assert "(default 3)" in internals
    with np.load(tmp_path / "ck.npz") as ck:
        record = json.loads(str(ck["__settings__"]))
    assert record["probe_option"] == 7
