"""eigenflow's on-disk cache of compiled numba code: where it lives, how a kernel joins it, and what it reports.

Every numba kernel of eigenflow (its own, and the NN-descent kernels of :mod:`.nndescent_kernels`) is compiled
once per machine and loaded from this cache by every later process: the Python API, the CLI, the flow's local
Dask workers, ``eigenflow serve`` and workers started with ``dask worker``.

Where: ``$EIGENFLOW_CACHE_DIR/numba`` when that variable is set, else ``$XDG_CACHE_HOME/eigenflow/numba``
(``~/.cache/eigenflow/numba`` when ``XDG_CACHE_HOME`` is unset); never inside the checkout or site-packages.
pynndescent's own cached kernels (its forest, search graph and queries) follow numba's
``NUMBA_CACHE_DIR``: eigenflow's processes (the CLI, flows, their local workers, ``serve``) default it to the
same folder (:mod:`tasks._env`); in a user's own Python process numba keeps them beside pynndescent's sources,
or in its user-wide cache when those are read-only. A cluster shares one cache by pointing ``EIGENFLOW_CACHE_DIR`` of
every worker at one shared directory, or fills each node's own cache once with ``eigenflow warm`` (numba writes each
file under a temporary name and renames it, so concurrent writers do not tear entries).

What is reused: an entry is loaded only when everything that shaped the compiled code matches. numba keys an
entry by the argument types, the function's bytecode, the source file's content hash, numba's version and the
CPU (name and features); :func:`cached_njit` adds a ``salt`` (for the NN-descent kernels: pynndescent's version
and a hash of its source files, whose code is compiled into them). An entry from another numba or pynndescent
version or another CPU is ignored and compiled anew beside it. A cache file that cannot be read (truncated,
corrupted, unreadable) is reported in a warning, its index reset, and the kernel compiled again: a cache never
makes a run fail. A cache directory that cannot be created or written is reported the same way, and the kernels
then compile in every process.

What is reported: :func:`compile_report` logs (logger ``spectral.neighbours.jit_cache``, level WARNING) every kernel
that numba compiles inside it instead of loading: the first-ever compile on a machine is slow, so it is never
silent. :func:`kernel_stats` tells how many loads and compiles each kernel had in this process.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Environment variable that moves the cache (its ``numba/`` subfolder holds the compiled kernels).
CACHE_DIR_ENV = "EIGENFLOW_CACHE_DIR"

#: The enclosing :func:`compile_report` block's record, if any: nested blocks add to it and stay quiet.
_ACTIVE_REPORT: contextvars.ContextVar[list | None] = contextvars.ContextVar("eigenflow_compile_report",
                                                                              default=None)

#: Every dispatcher made by :func:`cached_njit`, by qualified name (read by :func:`kernel_stats`).
_KERNELS: dict[str, Any] = {}


def cache_dir() -> Path:
    """The cache's root directory: ``$EIGENFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/eigenflow``, else
    ``~/.cache/eigenflow`` (an absolute path; not created here)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().absolute() / "eigenflow"


def numba_cache_dir() -> Path:
    """Where the compiled kernels are: ``cache_dir() / "numba"``."""
    return cache_dir() / "numba"


@functools.cache
def _function_cache_class() -> type:
    """numba's per-function cache with eigenflow's locator (``numba_cache_dir() / <module folder>_<path hash>``),
    a ``salt`` in every entry's key, and unreadable files treated as a miss (warned, index reset) instead of an
    exception in the caller. Built on first use, so that importing this module does not import numba."""
    from numba.core import caching

    class Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(numba_cache_dir() / self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

    class CacheImpl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    class FunctionCache(caching.FunctionCache):
        _impl_class = CacheImpl

        def __init__(self, py_func, salt: str):
            self._salt = salt
            super().__init__(py_func)

        def _index_key(self, sig, codegen):
            return super()._index_key(sig, codegen) + (self._salt,)

        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except Exception as exc:  # a damaged entry must not fail the run: recompile and overwrite it
                warnings.warn(f"eigenflow: unreadable compiled-code cache entry for {self._py_func.__qualname__} "
                              f"in {self._cache_path} ({type(exc).__name__}: {exc}); it is compiled again and "
                              "replaced", RuntimeWarning, stacklevel=2)
                with contextlib.suppress(OSError):
                    self.flush()
                return None

    return FunctionCache


def cached_njit(*, salt: str = "", **options: Any) -> Callable[[Callable], Any]:
    """``numba.njit(**options)`` whose compiled code is cached in :func:`numba_cache_dir`.

    Parameters
    ----------
    salt : str
        Added to the key of every cache entry: what the compiled code depends on beyond the function's own
        source file (e.g. the version and source hash of a library whose kernels it calls). An entry with
        another salt is never loaded.
    **options
        numba's ``njit`` options (``parallel``, ``fastmath``, ...); ``cache`` is not accepted (this is the cache).
    """
    if "cache" in options:
        raise TypeError("cached_njit caches by construction; do not pass cache=")

    import numba

    def decorate(func: Callable) -> Any:
        dispatcher = numba.njit(**options)(func)
        try:
            dispatcher._cache = _function_cache_class()(dispatcher.py_func, salt)
        except (OSError, RuntimeError) as exc:
            warnings.warn(f"eigenflow: the compiled-code cache {numba_cache_dir()} cannot be used "
                          f"({type(exc).__name__}: {exc}); {func.__qualname__} is compiled in every process. Set "
                          f"{CACHE_DIR_ENV} to a writable directory.", RuntimeWarning, stacklevel=2)
        _KERNELS[f"{func.__module__}.{func.__qualname__}"] = dispatcher
        return dispatcher

    return decorate


def source_digest(*paths: Path | str) -> str:
    """SHA-256 (hex) of the named files' contents, in the given order: a :func:`cached_njit` salt that changes
    when any of them does."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def kernel_stats() -> dict[str, dict[str, int]]:
    """Per kernel of :func:`cached_njit`: ``{"loaded": cache hits, "compiled": cache misses}`` in this process
    (numba's dispatcher statistics; kernels not called yet count 0 and 0)."""
    stats = {}
    for name, dispatcher in _KERNELS.items():
        s = dispatcher.stats
        stats[name] = {"loaded": int(sum(s.cache_hits.values())), "compiled": int(sum(s.cache_misses.values()))}
    return stats


def _compile_listener(record: list[dict], what: str):
    """A numba event listener for :func:`compile_report` (numba imported on first use)."""
    from numba.core import event

    class CompileListener(_CompileListener, event.Listener):
        pass

    return CompileListener(record, what)


class _CompileListener:
    """Records each top-level numba compile (not the nested ones it triggers) with its duration; the first one of
    a :func:`compile_report` block is announced when it starts."""

    def __init__(self, record: list[dict], what: str):
        self._record = record
        self._what = what
        self._depth = 0
        self._start = 0.0
        self._announced = False

    def on_start(self, ev):
        if self._depth == 0:
            self._start = time.perf_counter()
            if not self._announced and _cacheable(ev.data["dispatcher"]):
                self._announced = True
                logger.warning("compiling %s's numba kernels, starting with %s: they are not in the compiled-code "
                               "cache %s yet (first use on this machine, or after an upgrade); this happens once "
                               "(about 3 minutes on 2 cores for all of `eigenflow warm`), later processes load "
                               "them", self._what,
                               _dispatcher_name(ev.data["dispatcher"]), numba_cache_dir())
        self._depth += 1

    def on_end(self, ev):
        self._depth -= 1
        if self._depth == 0:
            self._record.append({"kernel": _dispatcher_name(ev.data["dispatcher"]),
                                 "seconds": time.perf_counter() - self._start,
                                 "cacheable": _cacheable(ev.data["dispatcher"])})


def _cacheable(dispatcher) -> bool:
    """Whether numba caches what it compiles for ``dispatcher`` (closures and ``cache=False`` kernels it does not:
    pynndescent's query closures of metrics other than euclidean / cosine compile in every process)."""
    from numba.core import caching

    return not isinstance(getattr(dispatcher, "_cache", None), (caching.NullCache, type(None)))


def _dispatcher_name(dispatcher) -> str:
    func = getattr(dispatcher, "py_func", None)
    return f"{func.__module__}.{func.__qualname__}" if func is not None else repr(dispatcher)


@contextlib.contextmanager
def compile_report(what: str = "eigenflow") -> Iterator[list[dict]]:
    """Report the kernels numba compiles (instead of loading them from a cache) within the block.

    The first compile is announced when it starts and a summary (count, seconds, slowest kernel) is logged at the
    end of the block (logger ``spectral.neighbours.jit_cache``, level WARNING, so it shows without logging configured).
    A block inside another one adds to the outer block's record and reports nothing itself.
    Yields the list of ``{"kernel": qualified name, "seconds": float, "cacheable": bool}`` filled as compiles
    end (kernels numba cannot cache are listed but not announced: they compile in every process); ``what``
    names the work in the messages (e.g. "NN-descent").
    """
    from numba.core import event

    outer = _ACTIVE_REPORT.get()
    if outer is not None:  # inside another report: it announces and sums up
        yield outer
        return
    record: list[dict] = []
    token = _ACTIVE_REPORT.set(record)
    try:
        with event.install_listener("numba:compile", _compile_listener(record, what)):
            yield record
    finally:
        _ACTIVE_REPORT.reset(token)
        cached = [r for r in record if r["cacheable"]]
        if cached:
            slowest = max(cached, key=lambda r: r["seconds"])
            logger.warning("compiled %d numba kernels for %s in %.1f s (slowest %s: %.1f s); later processes load "
                           "them from the cache", len(cached), what, sum(r["seconds"] for r in cached),
                           slowest["kernel"], slowest["seconds"])
