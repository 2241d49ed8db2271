"""eigenflow's compiled-code cache: a fresh process loads NN-descent instead of compiling it; damaged, foreign or
unwritable caches are ignored (compiled again), never fatal; the graphs are those of an uncached build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

#: Builds an NN-descent graph and queries it in a fresh interpreter; prints the kernels' statistics, what was
#: compiled and a digest of the graph and the query answers.
BUILD_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, warnings
    import numpy as np
    if len(sys.argv) > 1:  # pretend another pynndescent version wrote / reads the cache
        import pynndescent
        pynndescent.__version__ = sys.argv[1]
    from eigenflow.spectral.neighbours import jit_cache
    from eigenflow.spectral.neighbours.index import KNNIndex

    X = np.random.default_rng(0).normal(size=(600, 8)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught, jit_cache.compile_report() as compiled:
        warnings.simplefilter("always")
        index = KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1)
        found = index.query(X[:50] + 0.01, 5)
    digest = hashlib.sha256()
    for array in (*index.neighbor_graph(), *found):
        digest.update(np.ascontiguousarray(array).tobytes())
    print(json.dumps({"stats": jit_cache.kernel_stats(), "digest": digest.hexdigest(),
                      "compiled": [r["kernel"] for r in compiled if r["cacheable"]],
                      "warnings": [str(w.message) for w in caught if "eigenflow" in str(w.message)]}))
""")

NN_DESCENT = "eigenflow.spectral.neighbours.nndescent_kernels._nn_descent_squared_euclidean"
REFINE = "eigenflow.spectral.neighbours._refine._refine_rows"
DROP_SELF = "eigenflow.spectral.neighbours._refine._drop_self_rows"


def run_build(cache: Path, *args: str) -> dict:
    env = {**os.environ, "EIGENFLOW_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A copy of the session's compiled-code cache (filled by ``eigenflow warm`` at set-up) and the result of one
    build on it (which fills in whatever the copy lacked)."""
    import shutil

    from eigenflow.spectral.neighbours.jit_cache import numba_cache_dir

    cache = tmp_path_factory.mktemp("eigenflow-cache")
    if numba_cache_dir().is_dir():
        shutil.copytree(numba_cache_dir(), cache / "numba")
    return cache, run_build(cache)


@pytest.mark.slow
def test_first_process_compiles_and_says_so(tmp_path, warm_cache):
    """A process on an empty cache compiles the kernels, says so and where, fills the cache, and builds the graph a
    process that loads the kernels builds."""
    first = run_build(tmp_path)
    assert first["stats"][NN_DESCENT] == {"loaded": 0, "compiled": 1}
    assert NN_DESCENT in first["compiled"]
    assert "compiling eigenflow's numba kernels" in first["stderr"]
    assert str(tmp_path / "numba") in first["stderr"]
    assert list((tmp_path / "numba").rglob("*.nbi")), "nothing was written to the cache"
    assert first["digest"] == warm_cache[1]["digest"]


def test_fresh_process_loads_from_cache_and_compiles_nothing(warm_cache):
    cache, first = warm_cache
    second = run_build(cache)
    for kernel in (NN_DESCENT, REFINE, DROP_SELF):
        assert second["stats"][kernel]["loaded"] >= 1, (kernel, second["stats"])
        assert second["stats"][kernel]["compiled"] == 0, (kernel, second["stats"])
    assert second["compiled"] == []
    assert "compiling" not in second["stderr"]
    assert second["digest"] == first["digest"]  # the same graph and answers as the compiled (uncached) build


@pytest.mark.slow  # 9 s: compiles the kernels again
def test_damaged_cache_files_are_compiled_again(warm_cache, tmp_path):
    cache, first = warm_cache
    damaged = tmp_path / "cache"
    import shutil

    shutil.copytree(cache, damaged)
    indexes = sorted((damaged / "numba").rglob("_refine._drop_self_rows-*.nbi"))
    data = sorted((damaged / "numba").rglob("_refine._refine_rows-*.nbc"))
    assert indexes and data
    for path in indexes:
        path.write_bytes(path.read_bytes()[:40])  # truncated index
    for path in data:
        path.write_bytes(b"not a pickle" * 10)  # garbage data file
    third = run_build(damaged)
    assert third["digest"] == first["digest"]
    assert third["stats"][DROP_SELF] == {"loaded": 0, "compiled": 1}
    assert third["stats"][REFINE]["compiled"] >= 1
    assert third["stats"][NN_DESCENT] == {"loaded": 1, "compiled": 0}  # untouched entries still load
    assert any("unreadable compiled-code cache entry" in w for w in third["warnings"]), third["warnings"]
    fourth = run_build(damaged)  # the damaged entries were replaced
    assert all(s["compiled"] == 0 for s in fourth["stats"].values()), fourth["stats"]


def test_salt_keeps_entries_of_other_library_versions_apart(tmp_path, monkeypatch):
    """An entry written with another salt (another pynndescent version / source) is never loaded; both coexist."""
    monkeypatch.setenv("EIGENFLOW_CACHE_DIR", str(tmp_path))
    module = tmp_path / "salted_kernel.py"
    module.write_text(textwrap.dedent("""
        from eigenflow.spectral.neighbours.jit_cache import cached_njit

        def make(salt):
            @cached_njit(salt=salt)
            def twice(x):
                return 2 * x
            return twice
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        import salted_kernel

        def stats(salt):
            kernel = salted_kernel.make(salt)
            assert kernel(21) == 42
            return dict(kernel.stats.cache_hits), dict(kernel.stats.cache_misses)

        assert stats("pynndescent 0.7.0 aaa")[1]  # compiled
        assert stats("pynndescent 0.7.0 aaa")[0]  # loaded
        assert stats("pynndescent 0.7.1 bbb")[1]  # another version: compiled, not loaded
        assert stats("pynndescent 0.7.0 aaa")[0]  # the first entry is still there
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("salted_kernel", None)


def test_salt_names_pynndescent_version_and_sources():
    import pynndescent

    from eigenflow.spectral.neighbours.nndescent_kernels import PYNNDESCENT_SALT

    assert PYNNDESCENT_SALT.startswith(f"pynndescent {pynndescent.__version__} ")
    assert len(PYNNDESCENT_SALT.split()[-1]) == 64


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    from eigenflow.spectral.neighbours import jit_cache

    monkeypatch.setenv("EIGENFLOW_CACHE_DIR", str(tmp_path / "c"))
    assert jit_cache.numba_cache_dir() == tmp_path / "c" / "numba"
    monkeypatch.delenv("EIGENFLOW_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit_cache.cache_dir() == tmp_path / "xdg" / "eigenflow"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert jit_cache.cache_dir() == Path.home() / ".cache" / "eigenflow"


def test_cached_njit_refuses_cache_option():
    from eigenflow.spectral.neighbours.jit_cache import cached_njit

    with pytest.raises(TypeError, match="cache"):
        cached_njit(cache=True)


def test_unwritable_cache_warns_and_still_runs(tmp_path):
    """A cache directory that cannot be created: a warning naming it, then the kernels compile and run."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {**os.environ, "EIGENFLOW_CACHE_DIR": str(blocker / "cache"), "PYTHONPATH": str(REPO)}
    script = ("import warnings, numpy as np\nwarnings.simplefilter('always')\n"
              "from eigenflow.spectral.neighbours._refine import drop_self\n"
              "print(drop_self(np.array([[0, 1], [0, 1]]), 1).tolist())")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[[1], [0]]"
    assert "cannot be used" in done.stderr and "EIGENFLOW_CACHE_DIR" in done.stderr


@pytest.mark.slow
def test_cached_build_equals_pynndescent_and_other_version_recompiles(warm_cache):
    """The cached loop gives pynndescent's own NNDescent graph (all three metrics); a process that sees another
    pynndescent version compiles its own entry instead of loading this one, with the same graph."""
    from pynndescent import NNDescent

    from eigenflow.spectral.neighbours.nndescent_kernels import CachedNNDescent

    X = np.random.default_rng(1).normal(size=(3000, 12)).astype(np.float32)
    for metric in ("euclidean", "cosine", "manhattan"):
        ours = CachedNNDescent(X, metric=metric, n_neighbors=11, random_state=3, n_jobs=1, compressed=False)
        theirs = NNDescent(X, metric=metric, n_neighbors=11, random_state=3, n_jobs=1, compressed=False)
        np.testing.assert_array_equal(ours.neighbor_graph[0], theirs.neighbor_graph[0])
        np.testing.assert_array_equal(ours.neighbor_graph[1], theirs.neighbor_graph[1])
    cache, first = warm_cache
    other = run_build(cache, "0.6.99")
    assert other["stats"][NN_DESCENT] == {"loaded": 0, "compiled": 1}
    assert other["digest"] == first["digest"]
    again = run_build(cache)
    assert again["stats"][NN_DESCENT] == {"loaded": 1, "compiled": 0}


def _worker_build() -> dict:
    """Runs on a ``dask worker``: an NN-descent build, then what the worker's kernels did."""
    import numpy as np

    from eigenflow.spectral.neighbours import jit_cache
    from eigenflow.spectral.neighbours.index import KNNIndex

    X = np.random.default_rng(0).normal(size=(600, 8)).astype(np.float32)
    KNNIndex.build(X, 10, method="nndescent", random_state=0, n_jobs=1)
    return {"stats": jit_cache.kernel_stats(), "cache": str(jit_cache.numba_cache_dir())}


def test_dask_worker_command_loads_from_shared_cache(warm_cache):
    """Workers started with ``dask worker`` (a real scheduler and worker on loopback) load the kernels from the
    cache their EIGENFLOW_CACHE_DIR names, instead of compiling them."""
    import signal
    import time

    from distributed import Client

    from tests.helpers import free_port

    cache, _ = warm_cache
    # the worker imports this module to run _worker_build
    env = {**os.environ, "EIGENFLOW_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    dask = str(Path(sys.executable).with_name("dask"))
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--dashboard-address", ":0"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1",
                               "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, cwd=REPO)
    try:
        with Client(address, timeout=60) as client:
            deadline = time.monotonic() + 120
            while not client.scheduler_info()["workers"]:
                assert time.monotonic() < deadline, "the dask worker did not connect"
                time.sleep(0.2)
            result = client.submit(_worker_build, pure=False).result(timeout=300)
    finally:
        for process in (worker, scheduler):
            os.killpg(process.pid, signal.SIGTERM)
        for process in (worker, scheduler):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert result["cache"] == str(cache / "numba")
    assert result["stats"][NN_DESCENT] == {"loaded": 1, "compiled": 0}
    assert result["stats"][REFINE]["compiled"] == 0 and result["stats"][REFINE]["loaded"] >= 1


#: Fits LaplacianEigenmaps with NN-descent and with the exact search in a fresh interpreter; prints what was compiled.
FIT_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    from eigenflow.spectral import LaplacianEigenmaps
    from eigenflow.spectral.neighbours import jit_cache

    X = np.random.default_rng(0).normal(size=(2000, 8)).astype(np.float32)
    with jit_cache.compile_report() as compiled:
        for method in ("nndescent", "exact"):
            LaplacianEigenmaps(n_neighbors=10, knn_method=method, random_state=0).fit(X)
    print(json.dumps({"compiled": [r["kernel"] for r in compiled if r["cacheable"]]}))
""")


def test_a_fit_after_the_warm_up_compiles_nothing():
    """What ``eigenflow warm`` loads (``warm_nndescent``, here for float32 data and both search methods) covers a
    ``LaplacianEigenmaps`` fit: a fresh process fitting with NN-descent and with the exact search compiles no kernel
    (e.g. no variant for read-only graph arrays). Runs on the session's compiled-code cache."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    warm = ("from eigenflow.tasks.bodies.worker import warm_nndescent; "
            "warm_nndescent(('float32',), ('euclidean',), ('nndescent', 'exact'))")
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, timeout=900, cwd=REPO, capture_output=True)
    done = subprocess.run([sys.executable, "-c", FIT_SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["compiled"] == []
