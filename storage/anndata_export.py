"""A run's per-point results written back into an AnnData file (``.h5ad``) or AnnData zarr directory, element by
element.

``export_to_anndata(store, "cells.h5ad", key="X_eigenflow")`` (or ``"cells.zarr"``, a directory written by
``AnnData.write_zarr``, zarr format 2 or 3) adds to the file, with anndata's element-level writer
(``anndata.io.write_elem``), and leaves every other element as it was:

- ``obsm[key]``: the embedding ``(n, k)``;
- ``obs[key + "_labels"]``: the predicted labels (TSK / RSK) as a categorical with the category names of the
  model's store (those of the ``obs`` column its labels were ingested from; for an ``extend`` run, the store of
  the model it used; the label values as strings when it has none);
- ``obsm[key + "_scores"]``: the scores ``(n, c)``, column ``j`` for class ``uns[key]["scores_columns"][j]``;
- ``uns[key]``: where the results come from (``store``, ``run``) and the scores' column names.

Without ``run``, the results are the store's table (:mod:`storage.results_table`: every cell once, from the latest
fit and the updates that placed the cells appended since), with two more categorical columns: ``obs[key + "_run"]``
(the run that placed the cell) and ``obs[key + "_placement"]`` (``fitted``, ``held_out`` or ``mapped``).

The file must hold the store's cells: the same number and, when the store kept the obs names of an AnnData source,
the same names in the same order; otherwise nothing is written. Each element is written under a temporary
top-level group of the file and moved to its name only once complete (an existing key is replaced only with
``overwrite``), and the temporary group is removed, also on failure: an element is either absent or whole. In a
zarr directory the move is the rename of the element's directory; a directory with consolidated metadata (as
``write_zarr`` leaves it) has it consolidated again once every element is in place, so that readers that use it
(zarr's default) see the new elements. ``out="copy.h5ad"`` (``out="copy.zarr"``) leaves the file alone and writes
a copy (a temporary file or directory beside the target, renamed into place once every element is in it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from . import layout
from .anndata_io import (_attr_str, _closing, _is_structured, _obs_columns, _strings, is_anndata_zarr,
                         read_obs_names)
from .checksums import check_intact
from .errors import StorageError, writing
from .export import output_path, replaced_atomically
from .manifest import list_runs, read_manifest
from .store import as_group, get_node, has_node, is_url, read_attrs

#: Default ``obsm`` key of the embedding.
DEFAULT_KEY = "X_eigenflow"
#: Temporary top-level group of the file that holds elements being written.
PARTIAL_GROUP = "eigenflow-partial"
#: Rows compared at a time when the file's obs names are checked against the store's.
_NAME_ROWS = 2**16


def export_to_anndata(store: Any, target: str, *, run: str | None = None, key: str = DEFAULT_KEY,
                      out: str | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Write the results of ``run`` (default: the store's table of results, module docstring) into ``target``.

    Returns ``{"path", "run", "written"}`` (``written``: the element paths, e.g. ``["obsm/X_eigenflow", ...]``).

    Raises
    ------
    StorageError
        ``target`` is neither an ``.h5ad`` file nor an AnnData zarr directory, its cells are not the store's
        (count or names), ``key`` is not a valid name, an element exists already and ``overwrite`` is False, or
        ``out`` is not of the target's format.
    """
    layout.check_name("obsm key", key)
    source = Path(target)
    kind = anndata_target_kind(source)
    if kind is None:
        raise StorageError(f"{target} must be an existing .h5ad file (AnnData's HDF5 format) or AnnData zarr "
                           "directory (written by AnnData.write_zarr)")
    with _opened(source, kind) as f:
        if any(name in f and _is_structured(f[name]) for name in ("obs", "obsm")):
            raise StorageError(
                f"{target} was written by anndata before 0.7 (obs / obsm are structured datasets): eigenflow adds "
                f"results to the current format only; rewrite it with anndata (anndata.read_h5ad('{target}')"
                ".write_h5ad('new.h5ad')) and export into the new file")
    from .results_table import Segment, table_segments

    if run is None:
        segments = table_segments(store)
    else:
        segments = [Segment(run, "", 0, int(get_node(as_group(store, "r"), output_path(run, "embedding")).shape[0]))]
    run = segments[0].run
    elements = _elements(store, segments, key, table=len(segments) > 1 or segments[0].flow != "")
    with _opened(source, kind) as f:
        _check_cells(f, store, str(source))
        _check_free(f, elements, str(source), overwrite)
    written = [e[0] + "/" + e[1] for e in elements]
    if out is not None:
        _write_copy(source, kind, Path(out), elements, overwrite)
        return {"path": str(out), "run": run, "written": written}
    with writing(source):
        if kind == "h5ad":
            import h5py

            with h5py.File(source, "r+") as f:
                _write(f, elements)
        else:
            _write_zarr(source, elements)
    return {"path": str(source), "run": run, "written": written}


def anndata_target_kind(path: Path) -> str | None:
    """``"h5ad"`` for an existing ``.h5ad`` file, ``"zarr"`` for an AnnData zarr directory, else None."""
    if path.suffix.lower() == ".h5ad" and path.is_file():
        return "h5ad"
    return "zarr" if path.is_dir() and is_anndata_zarr(str(path)) else None


def _opened(path: Path, kind: str) -> Any:
    """The file opened read-only (an ``h5py.File`` or a ``zarr.Group``, without consolidated metadata), closed at the
    end of a ``with``."""
    if kind == "h5ad":
        import h5py

        return h5py.File(path, "r")
    import zarr

    return _closing(zarr.open_group(str(path), mode="r", use_consolidated=False))


def _write_copy(source: Path, kind: str, out: Path, elements: list, overwrite: bool) -> None:
    """Copy ``source`` to a temporary file (directory) beside ``out``, add the elements, rename it to ``out``."""
    if kind == "h5ad":
        import h5py

        with replaced_atomically(out, overwrite) as tmp, writing(out):
            shutil.copyfile(source, tmp)
            with h5py.File(tmp, "r+") as f:
                _write(f, elements)
        return
    if out.suffix.lower() != ".zarr":
        raise StorageError(f"out (--out) {str(out)!r} must be a directory name ending in .zarr: the copy of an AnnData "
                           f"zarr directory is one ({source} is)")
    if out.exists():
        if not overwrite:
            raise StorageError(f"{out} already exists: pass overwrite=True (CLI --overwrite) to replace it")
        if not (out.is_dir() and is_anndata_zarr(str(out))):
            raise StorageError(f"refusing to replace {out}: it is not an AnnData zarr directory")
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    try:
        with writing(out):
            shutil.copytree(source, tmp)
            _write_zarr(tmp, elements)
            if out.exists():
                os.rename(out, old)
            os.rename(tmp, out)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)


# ---- what is written ----------------------------------------------------------------------------------------
def _elements(store: Any, segments: list, key: str, *, table: bool) -> list[tuple[str, str, Any]]:
    """``[(group, name, value), ...]``: the outputs of the runs of ``segments`` (their rows, in order) as anndata
    elements (dask arrays read chunk by chunk); ``table``: with the run and placement columns."""
    import dask.array as da
    import pandas as pd

    group = as_group(store, "r")
    run = segments[0].run

    def rows(output: str) -> list:
        return [da.from_zarr(get_node(group, output_path(s.run, output)))[s.start:s.stop] for s in segments]

    elements: list[tuple[str, str, Any]] = [("obsm", key, da.concatenate(rows("embedding")))]
    info: dict[str, Any] = {"store": str(store), "run": run}
    model_store, model_run = _model_of(store, run)
    names = read_attrs(model_store).get(layout.ATTR_LABEL_CATEGORIES)
    if has_node(group, output_path(run, "labels")):
        codes = np.asarray(da.concatenate(rows("labels")).compute(), dtype=np.int64)  # (n,) small
        clusters = get_node(group, output_path(run, "labels")).attrs.get(layout.ATTR_LABELS_ARE) == "clusters"
        categories = list(names) if names is not None and not clusters else \
            [str(v) for v in range(int(codes.max(initial=-1)) + 1)]
        if codes.size and (codes.min() < -1 or codes.max() >= len(categories)):
            raise StorageError(f"labels of run {run!r} hold codes outside the store's {len(categories)} categories")
        elements.append(("obs", f"{key}_labels", pd.Categorical.from_codes(codes, categories=categories)))
    if has_node(group, output_path(run, "scores")):
        elements.append(("obsm", f"{key}_scores", da.concatenate(rows("scores"))))
        model_group = as_group(model_store, "r")
        classes_path = f"{layout.model_path(model_run)}/classes"
        if has_node(model_group, classes_path):
            classes = np.asarray(get_node(model_group, classes_path)[:], dtype=np.int64)
            info["scores_columns"] = [names[c] if names is not None and 0 <= c < len(names) else str(c)
                                      for c in classes.tolist()]
    if table:
        from .results_table import iter_table

        placed = [(runs, placement) for *_, runs, placement in iter_table(store, segments)]
        runs = [s.run for s in segments]
        elements += [("obs", f"{key}_run", pd.Categorical.from_codes(np.concatenate([r for r, _ in placed]),
                                                                      categories=runs)),  # one segment per run
                     ("obs", f"{key}_placement", pd.Categorical(np.concatenate([p for _, p in placed])))]
        if len(segments) > 1:  # the update runs and their rows [start, stop) (arrays: what anndata writes in uns)
            info["update_runs"] = np.array([s.run for s in segments[1:]])
            info["update_rows"] = np.array([[s.start, s.stop] for s in segments[1:]], dtype=np.int64)
    elements.append(("uns", key, info))
    return elements


def _model_of(store: Any, run: str) -> tuple[Any, str]:
    """``(store, run)`` of the model behind ``run``: the run itself, or for an ``extend`` run the model store and
    run its manifest names (:func:`_recorded_model_store`)."""
    if run not in list_runs(store):
        return store, run
    parameters = read_manifest(store, run).parameters
    if parameters.get("model_run") and parameters.get("store"):
        return _recorded_model_store(store, run, parameters["store"]), parameters["model_run"]
    return store, run


def _recorded_model_store(store: Any, run: str, recorded: str) -> str:
    """The model store an ``extend`` run's manifest names. Runs record a local path absolute; a relative one
    (recorded by an earlier version, relative to the directory the run was started from) is tried from the current
    directory, then beside ``store`` (where ``eigenflow extend ref.zarr new.h5ad new.zarr`` leaves both)."""
    if is_url(recorded) or os.path.isabs(recorded):
        return recorded
    url = str(store.url if hasattr(store, "url") else store)
    tried = [os.path.abspath(recorded)]
    if not is_url(url):
        tried.append(os.path.join(os.path.dirname(os.path.abspath(url.rstrip("/"))), recorded))
    for candidate in tried:
        if os.path.isdir(candidate):
            return candidate
    raise StorageError(f"run {run!r} of store {url} names its model store as {recorded!r}, a relative path that "
                       f"is not a directory from here nor beside the store (tried {tried}); run the export from "
                       "the directory the extend run was started in")


def _check_cells(f: Any, store: Any, path: str) -> None:
    """Refuse a file whose cells are not the store's: another count, or other obs names (first difference)."""
    n = int(read_attrs(store)[layout.ATTR_N])
    obs = f["obs"] if "obs" in f else None
    if obs is None:
        raise StorageError(f"{path} is not an AnnData file: it has no obs")
    index = obs[_attr_str(obs, "_index", "_index")]
    n_file = int(index.shape[0])
    if n_file != n:
        raise StorageError(f"{path} has {n_file} cells and store {store} has {n}: the file's cells are not the "
                           "store's")
    group = as_group(store, "r")
    if has_node(group, layout.OBS_NAME_OFFSETS):
        # damaged names are named as such, not taken for another file's cells
        check_intact(store, (layout.OBS_NAME_OFFSETS, layout.OBS_NAME_BYTES))
    for start in range(0, n, _NAME_ROWS):
        stop = min(start + _NAME_ROWS, n)
        kept = read_obs_names(group, start, stop)
        if kept is None:
            return  # a store ingested from another format: only the count can be checked
        ours = _strings(index, start, stop)
        differ = np.flatnonzero(ours != kept)
        if differ.size:
            i = int(differ[0])
            raise StorageError(f"{path}: cell {start + i} is named {str(ours[i])!r} in the file and {str(kept[i])!r} in store "
                               f"{store}: the file's cells are not the store's")


def _check_free(f: Any, elements: list, path: str, overwrite: bool) -> None:
    """Refuse to replace existing elements unless ``overwrite``."""
    taken = [f"{g}/{name}" for g, name, _ in elements if g in f and name in f[g]]
    if taken and not overwrite:
        raise StorageError(f"{path} already has {taken}: choose another key (CLI --obsm) or pass overwrite=True "
                           "(CLI --overwrite)")


def _write(f: Any, elements: list) -> None:
    """Write every element under :data:`PARTIAL_GROUP`, check that every destination is a group, then move each
    element to its place (and name a new obs column in the dataframe's ``column-order``); the partial group is
    removed whatever happens."""
    import h5py

    def move(partial: str, i: int, group: str, name: str, parent: Any) -> None:
        if name in parent:
            del parent[name]
        f.move(f"{partial}/{i}", f"{group}/{name}")

    def remove(partial: str) -> None:
        if partial in f:
            del f[partial]

    _place_elements(f, elements, h5py.Group, f"{f.filename}: {{name}} is a {{kind}}, not a group; the file is not "
                    "a valid AnnData file", move, remove, lambda names: np.array(names, dtype=object))


def _place_elements(container: Any, elements: list, group_type: type, not_a_group: str, move: Any, remove: Any,
                    as_attr: Any) -> None:
    """Every element ``(group, name, value)`` written under a new partial group of ``container`` (an h5py file or
    a zarr group; a destination group that is not a ``group_type`` is a StorageError with ``not_a_group``
    formatted with its ``name`` and ``kind``), then ``move(partial, i, group, name, parent)`` puts each in its
    place and a new ``obs`` column is named in ``column-order`` (stored as ``as_attr(names)``);
    ``remove(partial)`` runs whatever happens."""
    from anndata.io import write_elem

    partial = f"{PARTIAL_GROUP}-{secrets.token_hex(4)}"
    try:
        tmp = container.create_group(partial)
        for i, (_, _, value) in enumerate(elements):
            write_elem(tmp, str(i), value)
        for name in sorted({g for g, _, _ in elements}):
            if name in container and not isinstance(container[name], group_type):
                raise StorageError(not_a_group.format(name=name, kind=type(container[name]).__name__))
        for i, (group, name, _) in enumerate(elements):
            parent = container.require_group(group)
            move(partial, i, group, name, parent)
            if group == "obs" and name not in _obs_columns(parent):
                parent.attrs["column-order"] = as_attr(_obs_columns(parent) + [name])
    finally:
        remove(partial)


def _zarr_consolidated(root: Path) -> int | None:
    """The zarr format (2 or 3) of the AnnData zarr directory ``root`` when it has consolidated metadata, else None."""
    if (root / ".zmetadata").is_file():
        return 2
    meta = root / "zarr.json"
    if meta.is_file() and json.loads(meta.read_text(encoding="utf-8")).get("consolidated_metadata"):
        return 3
    return None


def _write_zarr(root: Path, elements: list) -> None:
    """:func:`_write` for an AnnData zarr directory: every element written under :data:`PARTIAL_GROUP`, each moved
    to its place by renaming its directory (a replaced element goes into the partial group first), the partial
    group removed whatever happens; the metadata consolidated again when the directory had it consolidated."""
    import zarr

    consolidated = _zarr_consolidated(root)
    group = zarr.open_group(str(root), mode="r+", use_consolidated=False)

    def move(partial: str, i: int, name: str, element: str, parent: Any) -> None:
        destination = root / name / element
        if destination.exists():
            os.rename(destination, root / partial / f"replaced-{i}")
        os.rename(root / partial / str(i), destination)

    def remove(partial: str) -> None:
        if (root / partial).exists():
            shutil.rmtree(root / partial)

    _place_elements(group, elements, zarr.Group, f"{root}: {{name}} is an array, not a group; the directory is not "
                    "a valid AnnData zarr store", move, remove, list)
    if consolidated is not None:
        zarr.consolidate_metadata(str(root), zarr_format=consolidated)
