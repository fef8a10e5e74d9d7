"""The notebooks in ``notebooks/`` run end to end in their quick mode, so none can rot.

Each notebook is executed with nbclient in a fresh kernel of *this* interpreter (a
kernelspec written to a temporary ``JUPYTER_PATH``, so a ``python3`` kernel installed
elsewhere on the machine cannot be picked up instead), with ``BMCZOO_QUICK=1`` (the
notebooks' small parameter sets), a headless Matplotlib and a temporary experiment cache
(``BMCZOO_NOTEBOOK_OUT``), so nothing cached by an earlier run is reused.  The quick runs
take a few minutes together on 2 cores: ``slow``.

A fast check (default suite) reads the committed notebooks: they must carry the outputs
of a complete full-mode run (every code cell executed in order, no error output).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = (
    "01_simulation_study.ipynb",
    "02_movielens.ipynb",
    "03_diagnostics_walkthrough.ipynb",
    "04_method_comparison.ipynb",
    "05_bayesian_outputs.ipynb",
    "06_binary_and_ordinal.ipynb",
    "07_side_information.ipynb",
    "09_implicit_feedback.ipynb",
)
KERNEL = "bmczoo-test-kernel"
CELL_TIMEOUT_S = 600
# a Python warning as printed by the warnings module ("...: SomeWarning: message")
WARNING_LINE = re.compile(r"\b\w*Warning: ")


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_carries_a_full_run(name):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    nbformat.validate(nb)
    cells = _code_cells(nb)
    assert cells, f"{name} has no code cell"
    first = "".join(cells[0].source)
    assert 'QUICK = os.environ.get("BMCZOO_QUICK", "0") == "1"' in first, (
        f"{name}: first code cell sets QUICK"
    )
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{name} was not run top to bottom in one kernel: {counts}"
    )
    for c in cells:
        for out in c.outputs:
            assert out.output_type != "error", (
                f"{name}: a cell failed ({out.get('ename')}: {out.get('evalue')})"
            )
    printed = "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream")
    assert "QUICK = False" in printed, (
        f"{name} carries the outputs of a quick run, not of a full one"
    )


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """Environment under which the ``KERNEL`` kernelspec runs this interpreter quickly."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "bmczoo tests",
                "language": "python",
            }
        )
    )
    env = {
        "JUPYTER_PATH": str(root),
        "JUPYTER_PLATFORM_DIRS": "1",  # jupyter_core's platformdirs migration notice
        "BMCZOO_QUICK": "1",
        "BMCZOO_NOTEBOOK_OUT": str(root / "experiments"),
        "MPLBACKEND": "Agg",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",  # debugpy's notice about frozen modules
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_quick_mode(name, kernel_env):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    try:
        client.execute()
    except CellExecutionError as e:  # the failing cell and its traceback, without nbclient's frames
        pytest.fail(f"{name}: {e}", pytrace=False)
    cells = _code_cells(nb)
    assert all(c.execution_count for c in cells), f"{name}: not every code cell ran"
    printed = "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream")
    assert "QUICK = True" in printed
    for c in cells:
        for out in c.outputs:
            assert out.output_type != "error", f"{name}: {out.get('ename')}: {out.get('evalue')}"
            if out.output_type == "stream" and out.name == "stderr":
                assert not WARNING_LINE.search(out.text), (
                    f"{name}: a warning was printed:\n{out.text}"
                )
