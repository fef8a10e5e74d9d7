"""Run by ``tests/inference/test_multiprocess.py``: the same Gibbs and VB fits in one
process or in one of several processes joined by ``jax.distributed.initialize`` (CPU
collectives over gloo), sharded over all the global devices; saves what every process
gets back (draws, predictions, RMSE, VB factors) as ``OUT_DIR/NAME.npz``.

Usage::

    two_processes.py single OUT_DIR LOCAL_DEVICES
    two_processes.py multi OUT_DIR LOCAL_DEVICES PORT NUM_PROCESSES PROCESS_ID

``single`` saves ``single.npz``; ``multi`` saves ``process{PROCESS_ID}.npz`` and also
runs the checkpointing drivers (one checkpoint file per process in ``OUT_DIR``).  Exits with status 77 when
the installed jaxlib has no gloo CPU collectives.
"""

from __future__ import annotations

import os
import sys

import jax

NO_GLOO = 77


def setup(
    mode: str, local_devices: int, port: int = 0, num_processes: int = 1, process_id: int = 0
) -> None:
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_num_cpu_devices", local_devices)
    if mode != "multi":
        return
    try:
        from jax._src.lib import _jax

        have_gloo = hasattr(_jax, "make_gloo_tcp_collectives")
    except ImportError:  # another layout of jaxlib: let initialize say
        have_gloo = True
    try:
        if not have_gloo:
            raise ValueError("jaxlib has no make_gloo_tcp_collectives")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError) as err:
        print(f"no gloo CPU collectives in this jax/jaxlib: {err}", file=sys.stderr)
        sys.exit(NO_GLOO)
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )


def problem():
    import numpy as np

    import bmczoo as bmc

    # 62 x 41 (not multiples of 4 devices: padding rows), with an empty row and an empty
    # column; about 500 ratings
    sim = bmc.datasets.simulate_paper(62, seed=2, m2=41)
    tr = sim.train
    keep = (tr.rows != 5) & (tr.cols != 7)
    train = tr.subset(np.flatnonzero(keep))
    return train, train.subset(np.arange(40))


def fits(devices, checkpoint_dir=None) -> dict:
    """The fits sharded over ``devices`` (None: the plain one-device fits); with
    ``checkpoint_dir`` the VB fit writes checkpoints there and a second Gibbs fit runs
    with the checkpointing driver (``gibbs_checkpointed/...``)."""
    import jax.numpy as jnp
    import numpy as np

    import bmczoo as bmc

    train, test = problem()
    rows, cols = np.array([0, 5, 61, 12, 30]), np.array([0, 7, 40, 3, 20])
    out = {}
    kw = dict(
        K=3,
        num_warmup=3,
        num_samples=6,
        thinning=2,
        num_chains=2,
        progress_bar=False,
        seed=7,
        store_factors=True,
        test=test,
        dtype=jnp.float64,
        devices=devices,
    )
    g = bmc.fit(train, method="gibbs", overrelax=-0.5, **kw)
    for k, v in g.samples.items():
        out[f"gibbs/{k}"] = np.asarray(v)
    out["gibbs/pred_mean"] = g.pred_mean
    out["gibbs/predict"] = np.asarray(g.predict(rows, cols))
    out["gibbs/rmse"] = np.asarray(g.rmse(test))
    ck = {}
    if checkpoint_dir is not None:
        ck = dict(
            checkpoint=os.path.join(checkpoint_dir, f"vb{jax.process_index()}.npz"),
            checkpoint_every=3,
        )
        g2 = bmc.fit(
            train,
            method="gibbs",
            overrelax=-0.5,
            checkpoint_every=4,
            checkpoint=os.path.join(checkpoint_dir, f"gibbs{jax.process_index()}.npz"),
            **kw,
        )
        for k, x in g2.samples.items():
            out[f"gibbs_checkpointed/{k}"] = np.asarray(x)
        out["gibbs_checkpointed/pred_mean"] = g2.pred_mean
    v = bmc.fit(
        train,
        method="vb",
        K=3,
        max_iter=8,
        tol=0.0,
        num_chains=2,
        progress_bar=False,
        seed=7,
        test=test,
        dtype=jnp.float64,
        devices=devices,
        **ck,
    )
    for f in ("m", "n", "V_diag", "W_diag", "elbo"):
        out[f"vb/{f}"] = np.asarray(getattr(v, f))
    out["vb/predict"] = np.asarray(v.predict(rows, cols))
    out["vb/rmse"] = np.asarray(v.rmse(test))
    return out


def main(argv) -> None:
    import numpy as np

    mode, out_dir, local = argv[0], argv[1], int(argv[2])
    if mode == "multi":
        port, num_processes, pid = (int(a) for a in argv[3:6])
        setup(mode, local, port, num_processes, pid)
        name = f"process{pid}"
    else:
        setup(mode, local)
        name = "single"
    devices = jax.devices()
    assert len(jax.local_devices()) == local, jax.local_devices()
    out = fits(devices, out_dir if mode == "multi" else None)
    out["num_devices"] = np.asarray(len(devices))
    out["num_processes"] = np.asarray(jax.process_count())
    np.savez(os.path.join(out_dir, name + ".npz"), **out)
    if mode == "multi":
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
