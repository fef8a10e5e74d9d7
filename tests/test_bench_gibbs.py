"""The driver of ``benchmarks/bench_gibbs.py``: lists of K and chains, the models, the
SMURFF jobs (and their absence when smurff is not importable or switched off), the ratio
table and the JSON file.  The workers are replaced by a stand-in that returns made-up
times, so these tests check the bookkeeping, not the speed; one test runs the SMURFF
worker itself on the 100K shape when smurff is importable."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "bench_gibbs", REPO / "benchmarks" / "bench_gibbs.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: made-up seconds per sweep (bmczoo) or iteration (peers) at K = 10, one chain, 100K:
#: full misses both of its targets, plain meets the SMURFF one
FAKE = {
    "plain": 0.010,
    "full": 0.015,
    "ig-moves": 0.012,
    "discrete-moves": 0.016,
    "smurff": 0.040,
    "myfm": 0.050,
}


def _fake_time(model: str, name: str, K: int, chains: int) -> float:
    per_chain = 1 if model in ("smurff", "myfm") else chains
    # distinct per size, so that a ratio taken across sizes would show
    return FAKE[model] * (K / 10) * per_chain * (1 + ("100k", "1m", "10m").index(name))


@pytest.fixture
def spawned(bench, monkeypatch):
    """Replace the subprocess by a stand-in; the list collects each job's arguments."""
    calls: list[dict] = []

    def fake_spawn(args, timeout):
        a = dict(zip(args[::2], args[1::2]))
        engine, name = a["--worker"].split(":")
        K, C, model = int(a["--K"]), int(a["--chains"]), a["--model"]
        calls.append(
            {
                "engine": engine,
                "name": name,
                "model": model,
                "K": K,
                "chains": C,
                "smurff_threads": a["--smurff-threads"],
            }
        )
        t = _fake_time(model, name, K, C)
        eng = {
            "bmczoo": "bmczoo" if model == "plain" else f"bmczoo-{model}",
            "smurff": "smurff 1.1",
            "myfm": "myfm 0.4",
        }[engine]
        r = {
            "name": name,
            "engine": eng,
            "model": model,
            "shape": [3, 4],
            "n": 5,
            "K": K,
            "chains": C,
            "per_sweep": [t, 0.5 * t],
            "median": t,
            "best": 0.5 * t,
            "cpu_median": t,
            "peak_rss_mb": 1.0,
        }
        if engine == "smurff":
            r["threads"] = int(a["--smurff-threads"])
        return r

    monkeypatch.setattr(bench, "_spawn", fake_spawn)
    monkeypatch.setattr(bench, "_myfm_available", lambda: False)
    return calls


def test_int_list(bench):
    assert bench._int_list("10", "--K") == [10]
    assert bench._int_list(" 10, 32,64,10 ", "--K") == [10, 32, 64]
    for bad in ("", "10,x", "0", "-3", "2.5"):
        with pytest.raises(ValueError, match="--K"):
            bench._int_list(bad, "--K")


def test_bad_arguments_are_named(bench, spawned, capsys):
    for argv, word in (
        (["--K", "10,abc"], "--K"),
        (["--chains", "0"], "--chains"),
        (["--models", "plain,fancy"], "--models"),
        (["--smurff-iters", "0"], "--smurff-iters"),
    ):
        with pytest.raises(SystemExit):
            bench.main(["--sizes", "100k", "--no-real", *argv])
        assert word in capsys.readouterr().err
    assert spawned == []


def test_models_of_the_new_members(bench):
    import bmczoo as bmc

    prior, likelihood, biases, moves = bench._model("ig-moves")
    assert isinstance(prior, bmc.priors.InverseGamma) and moves and prior.has_column_move
    assert likelihood is None and biases is None
    prior, likelihood, biases, moves = bench._model("discrete-moves")
    assert isinstance(prior, bmc.priors.Discrete) and moves and prior.has_column_move
    assert (prior.C, prior.p, prior.eps) == (1.0, 0.05, 0.07)
    prior, likelihood, biases, moves = bench._model("plain")
    assert isinstance(prior, bmc.priors.InverseGamma) and not moves
    prior, likelihood, biases, moves = bench._model("full")
    assert (
        isinstance(prior, bmc.priors.NormalWishart)
        and likelihood is not None
        and biases is not None
    )
    assert not moves
    with pytest.raises(ValueError, match="unknown model"):
        bench._model("fancy")


def test_without_smurff(bench, spawned, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench, "_smurff_available", lambda: False)
    out = tmp_path / "r.json"
    assert (
        bench.main(
            [
                "--sizes",
                "100k,1m",
                "--K",
                "10,32",
                "--chains",
                "1,4",
                "--models",
                "plain,full",
                "--no-real",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "SMURFF: skipped (smurff is not importable)" in text
    assert all(c["engine"] == "bmczoo" for c in spawned)
    jobs = {(c["name"], c["model"], c["K"], c["chains"]) for c in spawned}
    assert len(spawned) == len(jobs) == 2 * 2 * 2 * 2
    saved = json.loads(out.read_text())
    assert saved["K"] == [10, 32] and saved["chains"] == [1, 4] and saved["smurff_sizes"] == []
    assert len(saved["results"]) == 16 and len(saved["ratios"]) == 16
    assert len(saved["load_before"]) == 3 and len(saved["load_after"]) == 3
    for row in saved["ratios"]:
        assert (
            row["smurff_median"] is None
            and row["smurff_over_model_median"] is None
            and row["smurff_ok"] is None
        )
        t = _fake_time(row["model"], row["name"], row["K"], row["chains"])
        tp = _fake_time("plain", row["name"], row["K"], row["chains"])
        assert row["vs_plain_median"] == pytest.approx(t / tp)
        if row["model"] == "full":
            assert row["vs_plain_target"] == 1.4
            assert row["vs_plain_ok"] is (t / tp <= 1.4)
    assert "model / plain" in text and "x faster than SMURFF" in text


def test_no_smurff_flag(bench, spawned, monkeypatch, capsys):
    monkeypatch.setattr(bench, "_smurff_available", lambda: True)
    bench.main(["--sizes", "100k", "--no-real", "--no-smurff"])
    assert "SMURFF: skipped (--no-smurff)" in capsys.readouterr().out
    assert [c["engine"] for c in spawned] == ["bmczoo"]


def test_smurff_jobs_and_ratios(bench, spawned, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench, "_smurff_available", lambda: True)
    out = tmp_path / "r.json"
    bench.main(
        [
            "--sizes",
            "100k,10m",
            "--K",
            "10,64",
            "--chains",
            "1,4",
            "--models",
            "plain,full,discrete-moves",
            "--no-real",
            "--smurff-threads",
            "3",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert "SMURFF: 10m skipped (--smurff-10m adds it)" in text
    smurff_jobs = [(c["name"], c["K"], c["chains"]) for c in spawned if c["engine"] == "smurff"]
    assert smurff_jobs == [("100k", 10, 1), ("100k", 64, 1)]
    assert {c["smurff_threads"] for c in spawned} == {"3"}
    saved = json.loads(out.read_text())
    assert saved["smurff_sizes"] == ["100k"]
    smurff = {r["K"]: r for r in saved["results"] if r["model"] == "smurff"}
    assert all(r["threads"] == 3 for r in smurff.values())
    for row in saved["ratios"]:
        t = _fake_time(row["model"], row["name"], row["K"], row["chains"])
        if row["name"] == "10m":
            assert row["smurff_median"] is None
            continue
        ts = smurff[row["K"]]["median"]
        assert row["smurff_median"] == ts and row["smurff_threads"] == 3
        assert row["smurff_over_model_median"] == pytest.approx(ts / t)
        assert row["smurff_over_model_best"] == pytest.approx(
            ts / t
        )  # best = half of median for both
        if row["model"] in ("plain", "full") and row["K"] == 10 and row["chains"] == 1:
            assert row["smurff_target"] == 3.0 and row["smurff_ok"] is (ts / t >= 3.0)
        else:  # K = 64, four chains and the other models are reported without a target
            assert row["smurff_target"] is None and row["smurff_ok"] is None
        if row["model"] == "discrete-moves":
            assert row["vs_plain_target"] == 1.5
    # the made-up times give both outcomes: plain 4x faster than SMURFF, full 2.7x and 1.5x plain
    assert "ok >= 3" in text and "MISS >= 3" in text and "MISS <= 1.4" in text
    spawned.clear()
    bench.main(["--sizes", "10m", "--K", "10", "--no-real", "--smurff-10m"])
    assert [(c["engine"], c["name"]) for c in spawned] == [("bmczoo", "10m"), ("smurff", "10m")]


def test_column_moves_alias(bench, spawned, monkeypatch):
    monkeypatch.setattr(bench, "_smurff_available", lambda: False)
    bench.main(["--sizes", "100k", "--no-real", "--models", "plain,full", "--column-moves"])
    assert [c["model"] for c in spawned] == ["ig-moves", "full"]


def test_smurff_worker(bench, monkeypatch):
    pytest.importorskip("smurff")
    # the worker sets OMP_NUM_THREADS; monkeypatch puts the test process's value back
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    r = bench.worker_smurff("100k", 2, 2, 2, 0, 1)
    assert r["model"] == "smurff" and r["K"] == 2 and r["chains"] == 1 and r["n"] == 100_000
    assert r["shape"] == [943, 1682] and len(r["per_sweep"]) == 2 and r["sweeps_per_repeat"] == 2
    assert 0 < r["best"] <= r["median"] and r["threads"] == 1 and r["omp_num_threads"] == "1"
