"""A fifth prior is one module: dropping it into ``bmczoo/priors/`` makes it available."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import bmczoo

MODULE = textwrap.dedent(
    '''
    import dataclasses
    import jax.numpy as jnp
    import numpyro
    from .base import Prior, VBGamma, check_positive, set_fields

    @dataclasses.dataclass(frozen=True)
    class ProbePoint(Prior):
        gamma: float = 2.0
        name = "probe-point"

        def __post_init__(self):
            set_fields(self, check_positive("ProbePoint", gamma=self.gamma))

        def sample_gamma(self, K, d):
            return numpyro.deterministic("gamma", jnp.full((K,), self.gamma))

        def sample_conditional(self, key, S, d):
            return jnp.full_like(S, self.gamma)

        def vb_update(self, ES, d):
            return VBGamma(jnp.full_like(ES, 1 / self.gamma), -0.5 * d * jnp.log(self.gamma) - ES / (2 * self.gamma), {})

        def log_prob(self, gamma, d):
            return jnp.where(gamma == self.gamma, 0.0, -jnp.inf)

        def init_gamma(self, K, d, dtype=jnp.float32):
            return jnp.full((K,), self.gamma, dtype)
    '''
)


def test_new_prior_module_is_found(tmp_path):
    # copy the package, add one module, and use the new prior from a fresh interpreter
    pkg = Path(bmczoo.__file__).parent
    dst = tmp_path / "bmczoo"
    shutil.copytree(pkg, dst, ignore=shutil.ignore_patterns("__pycache__"))
    (dst / "priors" / "probe_point.py").write_text(MODULE)
    code = textwrap.dedent(
        """
        import numpy as np
        import bmczoo as bmc
        p = bmc.priors.get_prior("probe-point", gamma=3.0)
        assert isinstance(p, bmc.priors.ProbePoint) and p.gamma == 3.0
        r = bmc.RatingData([0, 1, 2, 0], [0, 1, 2, 2], [1.0, 2.0, 3.0, 0.5], (3, 3))
        f = bmc.fit(r, K=2, prior=p, num_warmup=5, num_samples=10, thinning=1, progress_bar=False)
        assert np.all(np.isfinite(f.predict([0, 1], [1, 2])))
        assert np.all(f.samples["gamma"] == 3.0)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
