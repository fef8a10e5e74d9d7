"""A checkpointed fit, run as a child process and interrupted with SIGINT by
``tests/inference/test_checkpoint.py``.  ``arguments`` is shared with the test.

The child is slowed down (a sleep at every progress-bar update, i.e. between
iterations) so that the interrupt lands mid-run; the parent resumes at full speed."""

from __future__ import annotations

import json
import signal
import sys
import time

import numpy as np

import bmczoo as bmc


def arguments(method: str):
    sim = bmc.datasets.simulate_paper(40, seed=1)
    train = sim.train
    if method == "gibbs":
        kw = dict(
            K=3,
            prior=bmc.priors.Gamma(beta=10.0),
            num_warmup=50,
            num_samples=800,
            thinning=2,
            num_chains=2,
            seed=5,
            test=train.subset(np.arange(30)),
            checkpoint_every=40,
        )
    else:
        kw = dict(
            K=3,
            prior=bmc.priors.InverseGamma(),
            method="vb",
            max_iter=600,
            tol=0.0,
            seed=5,
            num_chains=2,
            checkpoint_every=20,
        )
    return train, kw


if __name__ == "__main__":
    # a process started in the background by a non-interactive shell (as CI may run the
    # tests) inherits SIGINT ignored; restore Python's Ctrl-C handler, as in a terminal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    method, path = sys.argv[1], sys.argv[2]
    train, kw = arguments(method)
    total = kw["num_warmup"] + kw["num_samples"] if method == "gibbs" else kw["max_iter"]
    print(json.dumps({"total": total}), flush=True)
    import tqdm.auto

    import bmczoo.inference.run as run_loop

    class SlowBar(tqdm.auto.tqdm):
        def update(self, n=1):
            time.sleep(0.04)
            return super().update(n)

    tqdm.auto.tqdm = run_loop.tqdm = SlowBar
    bmc.fit(train, checkpoint=path, progress_bar=False, **kw)
