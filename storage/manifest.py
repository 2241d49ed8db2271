"""Run manifests: one JSON file per run at ``runs/<run>.json`` inside the store.

A manifest records the run id, flow name, parameters, seed, package versions, python / platform / host,
per-stage timings (start, end, seconds, status, error), the run's fixed time outside its stages
(``fixed_seconds``: name -> seconds, e.g. ``compile``, the workers' load of the kNN kernels; the
flows define the names, :mod:`flows.run`) and the run status (``running`` -> ``completed`` or ``failed``
with the error message), plus free-form JSON ``results`` (metrics, fingerprints, checksums).

Writes go through the store's filesystem: on local disks a temporary file in ``runs/`` then ``os.replace``
(atomic: a reader sees the old or the new manifest, never half of one); on object stores one PUT.

Usage (in a flow)::

    manifest = RunManifest.start(run_id, flow="embed", parameters=params, seed=seed)
    with run_context(store, manifest):           # completed / failed (+ error) at the end
        with stage(store, manifest, "knn"):      # timing + status of one stage, saved after it
            ...
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import posixpath
import socket
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from typing import Any, Iterator

from . import layout
from ._jsonable import check_attrs
from .errors import DamagedManifestError, DamagedManifestWarning, StoreFormatError, StorageError, writing
from .signals import signals_held
from .local_files import file_location, is_local, replace_local_file
from .store import StoreRef, filesystem, is_url

#: Distributions whose versions every manifest records.
TRACKED_PACKAGES = ("eigenflow", "numpy", "scipy", "dask", "distributed", "zarr", "prefect", "pynndescent",
                    "scikit-learn", "pyamg", "numba", "pandas", "pyarrow", "fsspec")
RUN_STATUSES = ("running", "completed", "failed")


def recorded_location(path: Any) -> str:
    """``path`` as a manifest records it: a local path made absolute (it is read later, from any directory), a URL
    as it is."""
    path = os.fspath(path)
    if path.startswith("file://"):
        path = path[len("file://"):]
    return path if is_url(path) else os.path.abspath(path)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def package_versions(packages: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """``{distribution: version or None if not installed}``."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _process_start() -> float | None:
    from .lock import process_identity

    return process_identity()["process_start"]


def effective_status(manifest: "RunManifest") -> str:
    """The manifest's status, except ``crashed`` for a ``running`` run whose process is gone (SIGKILL, power
    loss): same host, probed by pid and start time; another host, a run started over
    :data:`storage.lock.STALE_LOCK_SECONDS` ago."""
    from .lock import owner_alive

    if manifest.status != "running":
        return manifest.status
    started = datetime.fromisoformat(manifest.started).timestamp()
    owner = {"host": manifest.host, "pid": manifest.pid, "process_start": manifest.process_start}
    return "running" if owner_alive(owner, taken=started) else "crashed"


@dataclass
class StageRecord:
    """Timing and outcome of one stage of a run."""

    name: str
    start: str
    end: str | None = None
    seconds: float | None = None
    status: str = "running"
    error: str | None = None
    info: dict = field(default_factory=dict)


@dataclass
class RunManifest:
    """Everything needed to know what a run did (JSON round-trip via :meth:`to_dict` / :meth:`from_dict`)."""

    run_id: str
    flow: str
    parameters: dict
    seed: Any = None
    status: str = "running"
    error: str | None = None
    started: str = field(default_factory=_now)
    ended: str | None = None
    seconds: float | None = None
    versions: dict = field(default_factory=package_versions)
    python: str = field(default_factory=lambda: sys.version.split()[0])
    platform: str = field(default_factory=platform.platform)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    process_start: float | None = field(default_factory=lambda: _process_start())
    stages: list[StageRecord] = field(default_factory=list)
    fixed_seconds: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    schema_version: int = layout.SCHEMA_VERSION

    @classmethod
    def start(cls, run_id: str, *, flow: str, parameters: dict | None = None, seed: Any = None) -> "RunManifest":
        """A new manifest in status ``running``; ``parameters`` and ``seed`` must be JSON-able."""
        layout.check_name("run", run_id)
        return cls(run_id=run_id, flow=str(flow), parameters=check_attrs(parameters or {}, "parameters"),
                   seed=check_attrs({"seed": seed})["seed"])

    def to_dict(self) -> dict:
        """JSON-able dict."""
        return check_attrs(asdict(self), "manifest")

    @classmethod
    def from_dict(cls, data: dict) -> "RunManifest":
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        stages = [StageRecord(**s) for s in data.pop("stages", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known}, stages=stages)

    def stage_seconds(self) -> dict[str, float | None]:
        """``{stage name: seconds}`` (last record wins if a stage name repeats)."""
        return {s.name: s.seconds for s in self.stages}

    def finish(self, status: str = "completed", error: str | None = None) -> None:
        """Set the final status (``completed`` or ``failed``), the end time and the total seconds."""
        if status not in RUN_STATUSES:
            raise StorageError(f"status must be one of {list(RUN_STATUSES)}; got {status!r}")
        self.status, self.error, self.ended = status, error, _now()
        started = datetime.fromisoformat(self.started)
        self.seconds = (datetime.fromisoformat(self.ended) - started).total_seconds()


# ---- persistence ------------------------------------------------------------------------------------------------
def _manifest_path(store: StoreRef, run: str) -> tuple[Any, str]:
    fs, root = filesystem(store)
    return fs, posixpath.join(root, layout.manifest_key(run))


def write_manifest(store: StoreRef, manifest: RunManifest) -> str:
    """Write ``runs/<run>.json`` atomically; returns its path on the store's filesystem."""
    fs, path = _manifest_path(store, manifest.run_id)
    payload = json.dumps(manifest.to_dict(), indent=2, allow_nan=False).encode()
    with writing(file_location(fs, path)):
        if is_local(fs):
            replace_local_file(path, payload)
        else:
            fs.pipe_file(path, payload)  # a single object PUT is atomic on object stores
    return path


def remove_manifest(store: StoreRef, run: str) -> None:
    """Remove ``runs/<run>.json`` (a pruned run: :func:`storage.results_table.prune`)."""
    fs, path = _manifest_path(store, run)
    with writing(file_location(fs, path)):
        fs.rm_file(path)


def read_manifest(store: StoreRef, run: str) -> RunManifest:
    """Read the manifest of ``run``.

    Raises
    ------
    StoreFormatError
        No manifest for ``run``.
    DamagedManifestError
        The file cannot be read as a run manifest (cut short, not JSON, wrong fields); names the file and why.
    """
    fs, path = _manifest_path(store, run)
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError as exc:
        raise StoreFormatError(f"no manifest for run {run!r} ({path})") from exc
    try:
        return _checked(RunManifest.from_dict(json.loads(raw)))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DamagedManifestError(path, _damage(raw, exc)) from exc


def _checked(manifest: RunManifest) -> RunManifest:
    """``manifest`` if its status and start time are usable (what :func:`effective_status` and the latest-run
    lookups read), else ValueError."""
    if manifest.status not in RUN_STATUSES:
        raise ValueError(f"status {manifest.status!r} is not one of {list(RUN_STATUSES)}")
    datetime.fromisoformat(str(manifest.started))
    return manifest


def _damage(raw: bytes, exc: Exception) -> str:
    """A short phrase saying why ``raw`` is not a run manifest."""
    if not raw.strip():
        return "empty file"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg}, line {exc.lineno})"
    return f"wrong content ({type(exc).__name__}: {exc})"


def readable_manifests(store: StoreRef) -> list[RunManifest]:
    """The manifests of the store's runs that can be read; a damaged one is skipped with a
    :class:`DamagedManifestWarning` naming its file (the latest-run lookups of ``export`` and ``extend``)."""
    manifests = []
    for run in list_runs(store):
        try:
            manifests.append(read_manifest(store, run))
        except DamagedManifestError as exc:
            warnings.warn(f"skipping run {run!r}: {exc}", DamagedManifestWarning, stacklevel=2)
    return manifests


def add_results(store: StoreRef, run: str, results: dict) -> None:
    """Add ``results`` (the report's figures: quality, plot, peak memory) to the finished run's manifest."""
    manifest = read_manifest(store, run)
    manifest.results.update(results)
    write_manifest(store, manifest)


def list_runs(store: StoreRef) -> list[str]:
    """Run ids with a manifest in the store, sorted by name."""
    fs, root = filesystem(store)
    runs_dir = posixpath.join(root, layout.RUNS)
    if not fs.exists(runs_dir):
        return []
    names = [posixpath.basename(p) for p in fs.ls(runs_dir, detail=False)]
    return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))


# ---- context managers ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def stage(store: StoreRef, manifest: RunManifest, name: str,
          ) -> Iterator[StageRecord]:
    """Time one stage; record ``completed`` or ``failed`` (with the error) and save the manifest.

    The yielded :class:`StageRecord` has an ``info`` dict for small JSON-able facts (e.g. iterations).
    The exception of a failed stage is re-raised.
    """
    record = StageRecord(name=name, start=_now())
    manifest.stages.append(record)
    write_manifest(store, manifest)
    t0 = time.perf_counter()
    try:
        yield record
    except BaseException as exc:
        record.status, record.error = "failed", _error_text(exc)
        raise
    else:
        record.status = "completed"
    finally:
        with signals_held():
            record.seconds = time.perf_counter() - t0
            record.end = _now()
            record.info = check_attrs(record.info, f"info of stage {name!r}")
            write_manifest(store, manifest)


@contextlib.contextmanager
def run_context(store: StoreRef, manifest: RunManifest,
                ) -> Iterator[RunManifest]:
    """Save the manifest as ``running``, then ``completed`` or ``failed`` (error message kept, exception re-raised)."""
    write_manifest(store, manifest)
    try:
        yield manifest
    except BaseException as exc:
        with signals_held():  # a second Ctrl-C cannot leave the run "running"
            manifest.finish("failed", _error_text(exc))
            write_manifest(store, manifest)
        raise
    with signals_held():
        manifest.finish("completed")
        write_manifest(store, manifest)


def _error_text(exc: BaseException) -> str:
    """``"<type>: <message>"``; a signal's exception without a message is named by its signal
    (``"TerminationSignal: SIGTERM"``)."""
    text = str(exc)
    number = getattr(exc, "signal", None)
    if not text and isinstance(number, int):
        import signal

        text = signal.Signals(number).name
    return f"{type(exc).__name__}: {text}"
