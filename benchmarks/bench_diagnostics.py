"""Seconds of the diagnostics of the recommended fit on MovieLens 100K.

Fits the recommended model once, ``bmc.fit(train, K=10, prior=NormalWishart(),
likelihood=LearnedNoise(), biases=True, seed=0)`` (four chains and the default sweeps) on
``load_movielens("100k").split(0.2, seed=0)``, then times, one call each, in this order:

* ``fit.to_arviz()``;
* ``bmc.diagnostics.summary(fit)``;
* ``bmc.diagnostics.report(fit, folder)`` (its figures and tables written);
* ``az.plot_trace(fit.to_arviz())`` (the conversion and the drawing) and, separately,
  saving that figure as a PNG (``trace.png`` in ``--out``);
* the same trace plot with Matplotlib's constrained layout
  (``backend_kwargs={"layout": "constrained"}``, ``trace_constrained.png``): ArviZ's
  default layout, outside its own styles, lets the titles touch the tick labels above.

arviz and matplotlib (Agg) are imported before the first timing, as a user calling
``az.plot_trace`` has done.  Prints a table with the target (5 s each), the number of rows
of the trace plot, the load average and the machine.  The machine may be shared: the
times are wall-clock.

    python benchmarks/bench_diagnostics.py [--data ../shared/data/ml-100k] [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import tempfile
import time

TARGET_S = 5.0


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data",
        default=str(pathlib.Path(__file__).resolve().parents[1].parent / "shared/data/ml-100k"),
        help="folder of the MovieLens 100K files (u.data)",
    )
    ap.add_argument(
        "--out", default=None, help="folder for the report and the trace PNGs (default: a temp dir)"
    )
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    a = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import arviz as az
    import matplotlib.pyplot as plt

    import bmczoo as bmc

    out = (
        pathlib.Path(a.out)
        if a.out
        else pathlib.Path(tempfile.mkdtemp(prefix="bench_diagnostics_"))
    )
    out.mkdir(parents=True, exist_ok=True)
    load_before = _load()
    train, _ = bmc.datasets.load_movielens("100k", a.data, download=False).split(0.2, seed=0)
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=10,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        seed=0,
        progress_bar=False,
    )
    fit_s = time.perf_counter() - t0
    s = fit.info.settings
    chains, draws = (int(n) for n in fit.samples["theta"].shape[:2])

    times: dict[str, float] = {}

    def timed(name, fn):
        t = time.perf_counter()
        value = fn()
        times[name] = time.perf_counter() - t
        return value

    idata = timed("fit.to_arviz()", fit.to_arviz)
    timed("bmc.diagnostics.summary(fit)", lambda: bmc.diagnostics.summary(fit))
    timed("bmc.diagnostics.report(fit, dir)", lambda: bmc.diagnostics.report(fit, out / "report"))
    axes = timed("az.plot_trace(fit.to_arviz())", lambda: az.plot_trace(fit.to_arviz(), show=False))
    fig = axes.ravel()[0].figure
    timed("  + savefig trace.png", lambda: fig.savefig(out / "trace.png"))
    rows = axes.shape[0]
    plt.close(fig)
    axes = timed(
        "az.plot_trace(..., layout constrained)",
        lambda: az.plot_trace(fit.to_arviz(), show=False, backend_kwargs={"layout": "constrained"}),
    )
    fig = axes.ravel()[0].figure
    timed("  + savefig trace_constrained.png", lambda: fig.savefig(out / "trace_constrained.png"))
    plt.close(fig)
    load_after = _load()

    print(
        f"recommended fit on ML-100K ({train.n} training ratings): K=10, normal-wishart, learned noise, biases, "
        f"{chains} chains x {draws} kept draws ({s.num_warmup} warm-up + {s.num_samples} sweeps, thinning "
        f"{s.thinning}); bmc.fit {fit_s:.1f} s"
    )
    print(f"default posterior: {', '.join(idata.posterior.data_vars)}; trace plot rows: {rows}")
    print()
    width = max(len(k) for k in times)
    print(f"| {'call':<{width}} | seconds | target |")
    print(f"|{'-' * (width + 2)}|--------:|-------:|")
    for name, sec in times.items():
        target = "" if name.startswith("  +") else f"{TARGET_S:.0f} s"
        print(f"| {name:<{width}} | {sec:7.2f} | {target:>6} |")
    print()
    print(f"load average (1, 5, 15 min): before {load_before}; after {load_after}")
    print(f"machine: {_machine()}")
    print(f"files: {out}")
    result = {
        "times_s": times,
        "fit_s": fit_s,
        "trace_rows": rows,
        "chains": chains,
        "draws": draws,
        "posterior": list(idata.posterior.data_vars),
        "load_before": load_before,
        "load_after": load_after,
        "machine": _machine(),
        "out": str(out),
    }
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
