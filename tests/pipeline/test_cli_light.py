"""The commands that need no cluster and no flow import neither Prefect, Dask nor numba.

``--help``, ``methods``, ``info``, ``verify`` and ``export`` run in a subprocess whose imports of ``prefect``,
``prefect_dask``, ``dask``, ``distributed``, ``numba`` and ``pynndescent`` raise ``ImportError`` (a
``sys.meta_path`` finder installed before ``flows.cli:main`` is imported); ``embed`` in the same harness shows that
the blocker blocks. The store is written with the storage helpers alone (ingest, an embedding, a manifest).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from eigenflow.storage.embedding_io import write_embedding
from eigenflow.storage.ingest import ingest
from eigenflow.storage.manifest import RunManifest, write_manifest
from eigenflow.tasks._declared_params import UnreadableSignature, declared_init_defaults
from eigenflow.tasks.registry import REGISTRY, _jsonable

BLOCKED = ("prefect", "prefect_dask", "dask", "distributed", "numba", "pynndescent")

#: Run as ``python -c BOOTSTRAP ARGS...``: refuse the blocked packages, then run the CLI's entry point.
BOOTSTRAP = f"""
import sys

BLOCKED = {BLOCKED!r}


class RefuseHeavyImports:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"blocked import: {{name}}")
        return None


sys.meta_path.insert(0, RefuseHeavyImports())
from eigenflow.flows.cli import main

sys.argv = ["eigenflow", *sys.argv[1:]]
main()
"""


def light(*args: str, cwd) -> subprocess.CompletedProcess:
    """``eigenflow ARGS`` with the heavy packages refused (see the module docstring)."""
    return subprocess.run([sys.executable, "-c", BOOTSTRAP, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


RUN = "embed-light"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A 300 x 4 store with one completed run that has a (300, 2) embedding: ``(directory, embedding)``."""
    d = tmp_path_factory.mktemp("light")
    rng = np.random.default_rng(0)
    np.save(d / "X.npy", rng.normal(size=(300, 4)).astype(np.float32))
    ingest(str(d / "X.npy"), str(d / "s.zarr"), chunk_rows=128)
    Z = rng.normal(size=(300, 2)).astype(np.float32)
    manifest = RunManifest.start(RUN, flow="embed", parameters={"method": "laplacian_eigenmaps"}, seed=0)
    write_embedding(str(d / "s.zarr"), RUN, Z)
    manifest.finish("completed")
    write_manifest(str(d / "s.zarr"), manifest)
    return d, Z


def test_the_blocker_blocks(store):
    """The harness can fail: ``embed`` needs Prefect and stops on the refused import."""
    d, _ = store
    r = light("embed", "X.npy", "never.zarr", cwd=d)
    assert r.returncode != 0
    assert "blocked import: " in r.stderr
    assert not (d / "never.zarr").exists()


def test_help_without_heavy_imports(store):
    r = light("--help", cwd=store[0])
    assert r.returncode == 0, r.stderr
    for command in ("ingest", "methods", "embed", "extend", "export", "verify", "info", "serve", "demo"):
        assert command in r.stdout


def test_methods_without_heavy_imports_lists_the_live_signatures(store):
    """``methods --json`` under the blocker equals the description built from the imported estimators."""
    r = light("methods", "--json", cwd=store[0])
    assert r.returncode == 0, r.stderr
    expected = [{**entry.describe(), "parameters": {k: _jsonable(v) for k, v in entry.parameters.items()}}
                for entry in REGISTRY.values()]
    assert json.loads(r.stdout) == expected
    r = light("methods", cwd=store[0])
    assert r.returncode == 0, r.stderr
    for entry in REGISTRY.values():
        assert entry.name in r.stdout
    assert "n_neighbors=15" in r.stdout and "needed" in r.stdout


def test_info_verify_export_without_heavy_imports(store):
    d, Z = store
    r = light("info", "s.zarr", "--json", cwd=d)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["n"], data["d"]) == (300, 4)
    assert [(run["run_id"], run["status"]) for run in data["runs"]] == [(RUN, "completed")]
    r = light("info", "s.zarr", cwd=d)
    assert r.returncode == 0, r.stderr
    assert RUN in r.stdout and "arrays" in r.stdout
    r = light("verify", "s.zarr", cwd=d)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: s.zarr")
    for name in ("Z.npy", "Z.parquet"):
        r = light("export", "s.zarr", name, cwd=d)
        assert r.returncode == 0, r.stderr
        assert f"wrote {name}: embedding of run {RUN}, shape (300, 2)" in r.stdout
    np.testing.assert_array_equal(np.load(d / "Z.npy"), Z)
    import pyarrow.parquet as pq

    table = pq.read_table(d / "Z.parquet")
    np.testing.assert_array_equal(np.column_stack([table["c0"], table["c1"]]), Z)


def test_a_failing_light_command_still_ends_in_one_line(store):
    """The error path does not reach for Prefect's or the cluster's exception classes either."""
    r = light("info", "missing.zarr", cwd=store[0])
    assert r.returncode == 1
    assert r.stderr.startswith("error:") and "missing.zarr" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_declared_defaults_equal_the_live_signature(name):
    """Every registered estimator's ``__init__`` is read from its source (no fallback) exactly as
    :func:`inspect.signature` sees it: same names, order, values and types."""
    entry = REGISTRY[name]
    declared = declared_init_defaults(entry.estimator)
    live = {k: p.default for k, p in inspect.signature(entry.estimator_class.__init__).parameters.items()
            if k != "self" and p.kind is not p.VAR_KEYWORD}
    assert list(declared) == list(live)
    for key, value in live.items():
        assert type(declared[key]) is type(value) and declared[key] == value, key


def test_unreadable_defaults_are_refused(tmp_path, monkeypatch):
    """A default the reader does not follow raises, so the registry falls back to the live signature."""
    import eigenflow.tasks._declared_params as declared

    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .est import Est, Sub\n")
    (package / "const.py").write_text("SCALE = -2.5\n")
    (package / "est.py").write_text(
        "import numpy as np\n"
        "from . import const\n"
        "from .const import SCALE as S\n"
        "LIMIT = (1, S)\n\n"
        "class Est:\n"
        "    def __init__(self, a=const.SCALE, b=LIMIT, *, c=-S, d=None):\n"
        "        pass\n\n"
        "class Sub(Est):\n"
        "    pass\n\n"
        "class Bad:\n"
        "    def __init__(self, a=np.inf):\n"
        "        pass\n")
    monkeypatch.setattr(declared, "_ROOT", tmp_path)
    monkeypatch.setattr(declared, "SOURCE_PACKAGES", ("eigenflow.fakepkg",))  # <root>/fakepkg, installed so
    declared._symbols.cache_clear()
    try:
        expected = {"a": -2.5, "b": (1, -2.5), "c": 2.5, "d": None}
        assert declared_init_defaults("eigenflow.fakepkg:Est") == expected
        assert declared_init_defaults("eigenflow.fakepkg:Sub") == expected
        with pytest.raises(UnreadableSignature, match="np.inf"):
            declared_init_defaults("eigenflow.fakepkg.est:Bad")
    finally:
        declared._symbols.cache_clear()


#: What the process that runs the embed / extend flows must not import: the stage bodies' numerical libraries
#: (the workers import them), whose ~1.2 s of imports would delay the flow's start.
WORKER_ONLY = ("sklearn", "numba", "pynndescent", "pyamg", "matplotlib")


def test_the_flow_process_imports_no_numerical_library():
    """Importing the CLI and the embed / extend flows with their tasks loads none of :data:`WORKER_ONLY`."""
    code = ("import sys\n"
            "import eigenflow.flows.cli, eigenflow.flows.embed, eigenflow.flows.extend, eigenflow.flows.run\n"
            "import eigenflow.flows.cluster, eigenflow.flows.serve\n"
            "import eigenflow.tasks.fitting, eigenflow.tasks.points, eigenflow.tasks.bodies.laplacian_eigenmaps\n"
            "import eigenflow.tasks.bodies.sharded_eigenmaps, eigenflow.tasks.warm_up\n"
            f"print(sorted({{m.partition('.')[0] for m in sys.modules}} & set({WORKER_ONLY!r})))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
