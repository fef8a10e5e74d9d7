"""Several processes (``jax.distributed.initialize``, as on several hosts): two CPU
processes on localhost with two devices each, joined over gloo's CPU collectives, run
the Gibbs sampler (NumPyro's driver and the checkpointing driver) and VB sharded over the
four global devices; every process gets back the same fit as one process with four
devices (``scripts/two_processes.py``).  Skipped only when the installed jaxlib has no
gloo collectives."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bmczoo as bmc

SCRIPT = Path(__file__).parent / "scripts" / "two_processes.py"
NO_GLOO = 77  # the script's exit status when jaxlib has no gloo collectives
TIMEOUT = 150  # seconds for each of the two steps (about 10 s and 20 s on two idle cores)

# What differs between the runs is only the order of the floating-point sums: the psum of
# the four devices' contributions (S_h and the ELBO's parts) goes through gloo's allreduce
# across processes and through XLA's in-process all-reduce in one process, and one device
# sums in yet another order.  All-gathers and the per-row draws are exact.  Here the
# two-process draws and VB factors come out bit-identical to the one-process four-device
# run (only the ELBO differs, by ~1e-16 relative; one device: within ~1e-14).  The order
# of gloo's reduction is not specified, so the test allows what rounding of the psum can
# become over the few sweeps (as in test_sharding.py: float64 eps ~ 2.2e-16 carried by the
# chain, over-relaxation included, stays far below sqrt(eps) ~ 1.5e-8), while a wrong row
# block, key, padding or gather gives differences of order one.
TOL = np.sqrt(np.finfo(np.float64).eps)

# three child processes starting JAX and compiling every fit afresh (~1 min on two cores):
# the slow suite's; the default suite shards over four devices of one process in
# test_sharding.py
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env() -> dict:
    src = str(Path(bmc.__file__).resolve().parents[1])  # the bmczoo under test
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    # the scripts set the device count; other XLA flags (the suite's compile options) carry over
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f
    ]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    env["PYTHONPATH"] = os.pathsep.join(
        [src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["JAX_PLATFORMS"] = "cpu"
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("multiprocess")
    port, env = _free_port(), _env()
    cmds = {"single": [sys.executable, str(SCRIPT), "single", str(out), "4"]}
    for pid in range(2):
        cmds[f"process{pid}"] = [
            sys.executable,
            str(SCRIPT),
            "multi",
            str(out),
            "2",
            str(port),
            "2",
            str(pid),
        ]
    procs, logs = {}, {}
    try:
        # the reference first: the two processes run in lockstep and would wait on each
        # other while a third one holds a core
        for group in (["single"], ["process0", "process1"]):
            for name in group:
                procs[name] = subprocess.Popen(
                    cmds[name], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            logs.update({name: procs[name].communicate(timeout=TIMEOUT) for name in group})
    finally:
        for (
            p
        ) in procs.values():  # a timeout or a failed start leaves the others waiting on their peers
            if p.poll() is None:
                p.kill()
                p.communicate()
    codes = {name: p.returncode for name, p in procs.items()}
    if codes["process0"] == NO_GLOO or codes["process1"] == NO_GLOO:
        pytest.skip(
            "the installed jaxlib has no gloo CPU collectives: "
            + logs["process0"][1].strip()[-300:]
        )
    for name, code in codes.items():
        assert code == 0, f"{name} exited with {code}:\n{logs[name][1][-3000:]}"
    return {name: dict(np.load(out / f"{name}.npz")) for name in ("single", "process0", "process1")}


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b), initial=0.0)) / max(
        float(np.max(np.abs(a), initial=0.0)), 1.0
    )


def test_two_processes_see_four_devices(runs):
    for name in ("process0", "process1"):
        assert int(runs[name]["num_devices"]) == 4 and int(runs[name]["num_processes"]) == 2
    assert int(runs["single"]["num_devices"]) == 4 and int(runs["single"]["num_processes"]) == 1


def test_every_process_gets_the_same_fit(runs):
    p0, p1 = runs["process0"], runs["process1"]
    assert p0.keys() == p1.keys()
    for k in p0:
        np.testing.assert_array_equal(p0[k], p1[k], err_msg=k)


def test_two_processes_equal_one_process(runs):
    """Gibbs draws (factors included, padding rows dropped), posterior means, predictions,
    RMSE and the VB factors and ELBO equal those of one process with four devices (which
    equal one device's: test_sharding.py); the checkpointing driver gives the same draws
    as NumPyro's."""
    single, multi = runs["single"], runs["process0"]
    keys = [k for k in single if k.startswith(("gibbs/", "vb/"))]
    assert {
        "gibbs/M",
        "gibbs/N",
        "gibbs/gamma",
        "gibbs/predict",
        "gibbs/rmse",
        "vb/m",
        "vb/elbo",
        "vb/predict",
    } <= set(keys)
    assert multi["gibbs/M"].shape == (2, 3, 62, 3) and multi["vb/n"].shape == (41, 3)
    diffs = {}
    for k in keys:
        diffs[k] = _rel(single[k], multi[k])
    for k in [k for k in multi if k.startswith("gibbs_checkpointed/")]:
        diffs[k] = _rel(single["gibbs/" + k.split("/", 1)[1]], multi[k])
    assert any(k.startswith("gibbs_checkpointed/") for k in diffs)
    bad = {k: v for k, v in diffs.items() if not v <= TOL}
    assert not bad, bad
