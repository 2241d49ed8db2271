"""The checks of a run's arguments, made before any work: an ``embed`` run's (:func:`check_embed_arguments`), an
``extend`` or ``update`` run's and the model they place new rows with (:func:`check_extend_arguments`,
:func:`check_update_arguments`), and an AnnData source's options.

The parameters are checked against the source's shape and labels before the ingest. The number of rows of a source
is known from its header (``.npy`` / ``.npz`` / ``.parquet`` / zarr: see :class:`storage.source.Source`; a CSV is
only known once read, and is left to the fit), the labels from a ``.npy`` file read as a memory map or the labels of
a store. The bounds are those the fit stages would enforce later, behind a store already written: every refusal
names the parameter, the allowed range and the value received (``"n_neighbors must be in [1, 19] for 20 rows to
fit; got 50"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eigenflow.spectral._validation import check_choice, check_float, check_int
from eigenflow.spectral.errors import ParameterError
from eigenflow.storage import layout
from eigenflow.storage.arrays import x_shape
from eigenflow.storage.errors import StoreFormatError
from eigenflow.storage.lock import check_unlocked
from eigenflow.storage.manifest import RunManifest, read_manifest, readable_manifests
from eigenflow.storage.models import list_models
from eigenflow.storage.store import Store
from eigenflow.tasks.ingest import (existing_store_attrs, first_store_attrs, open_existing, same_location,
                                    with_opened)
from eigenflow.tasks.registry import DEFAULT_METHOD, check_estimator_params, check_params, get_entry
from eigenflow.tasks.sharded_choice import SHARDED_METHOD, check_sharded

def check_embed_arguments(source: str, store: str | Store, method: str, params: dict | None, *, labels: str | None,
                          holdout: float, n_workers: int, random_state: Any, overwrite: bool = False,
                          sharded: bool | None = None, use_rep: str | None = None,
                          labels_obs: str | None = None, run: str | None = None) -> dict[str, Any]:
    """Validate the arguments of :func:`flows.embed.embed` before any work; returns the method's full parameters.

    ``store``: its URL (a complete store there is opened, validated, once for these checks:
    :func:`tasks.ingest.open_existing`), or the handle of the existing store (not validated again).

    The run's ``random_state`` is the method's seed (one seed entry point): ``params`` may not set it. ``run``:
    the run's id when it is known (a lock this process holds for it is not another run's).
    """
    params = dict(params or {})
    if "random_state" in params:
        raise ParameterError("random_state is the run's seed: pass random_state=... (CLI --seed), not as a method "
                             "parameter")
    check_float("holdout", holdout, low=0.0, high=1.0, high_inclusive=False)
    check_int("n_workers", n_workers, low=1)
    check_unlocked(store, run)  # another live run on this store (or claiming it, new): fail now, before any work
    check_anndata_options(source, use_rep, labels_obs, labels)
    if not overwrite and not isinstance(store, Store):
        store = opened_or_url(store)
    n = _source_rows(source, store)  # first: a missing or unreadable source is refused before the estimators load
    has_labels = labels_obs is not None or _will_have_labels(source, store, labels, overwrite)
    full = check_params(method, params, estimator=False, has_labels=has_labels)  # the estimator's own: last
    if "random_state" in full:
        full["random_state"] = random_state
    if sharded is not None and not isinstance(sharded, bool):
        raise ParameterError(f"sharded must be True, False or None (auto); got {sharded!r}")
    if sharded:
        check_sharded(method, full)
    _check_source_shape(source, store, n, method, full, labels=labels, holdout=holdout, overwrite=overwrite)
    check_estimator_params(get_entry(method), full)  # after the bounds that name the source's size
    return full


@dataclass(frozen=True)
class StoredModel:
    """The model an ``extend`` or ``update`` run places new rows with: the run of ``store`` that wrote it, and that
    run's manifest (its method and parameters)."""

    store: Store
    run: str
    manifest: RunManifest

    @property
    def method(self) -> str:
        return self.manifest.parameters.get("method", DEFAULT_METHOD)


def stored_model(store: Store, run: str | None) -> StoredModel:
    """The model of ``run`` in ``store``; None: of the latest completed ``embed`` run that has one."""
    with_models = list_models(store)
    if run is None:
        done = [m for m in readable_manifests(store)  # a damaged manifest is skipped, with a warning
                if m.flow == "embed" and m.status == "completed" and m.run_id in with_models]
        if not done:
            raise StoreFormatError(f"store {store} has no completed embed run with a model; run `eigenflow embed` "
                                   "first")
        run = max(done, key=lambda m: m.started).run_id
    if run not in with_models:
        raise StoreFormatError(f"store {store} has no model for run {run!r}; runs with models: {with_models}")
    return StoredModel(store, run, read_manifest(store, run))


def check_extend_arguments(store: str, new_source: str, *, run: str | None, n_workers: int, sharded: bool | None,
                           use_rep: str | None) -> tuple[StoredModel, bool]:
    """Validate the arguments of :func:`flows.extend.extend` before any work: ``(the model, whether the new points
    are searched in per-shard indexes)``. New points must have the model's number of features, read from the
    source's header (a CSV, whose width is known only once read, is checked after its ingest)."""
    from eigenflow.storage.checksums import check_intact
    from eigenflow.storage.readers import source_n_columns
    from eigenflow.tasks.bodies.sharded_extend import sharded_fit_record

    check_int("n_workers", n_workers, low=1)
    check_anndata_options(new_source, use_rep, None, None)
    if sharded is not None and not isinstance(sharded, bool):
        raise ParameterError(f"sharded must be True, False or None (as the model was fitted); got {sharded!r}")
    model = stored_model(Store.open(store, "r"), run)  # the model store's one whole-store check; read only
    use_shards = sharded_fit_record(model.store, model.run) is not None if sharded is None else sharded
    if use_shards and model.method != SHARDED_METHOD:
        raise ParameterError(f"sharded=True extends {SHARDED_METHOD!r} models; run {model.run!r} is method "
                             f"{model.method!r}")
    expected, got = x_shape(model.store)[1], source_n_columns(new_source, x_key=use_rep or "X")
    if got is not None and got != expected:
        raise StoreFormatError(f"new points must have {expected} features like the model's training data; "
                               f"{new_source} has {got}")
    check_intact(model.store)  # the model store's X (a kNN index may be rebuilt from it)
    return model, use_shards


def check_update_arguments(source: str, store: str, *, n_workers: int, max_share: float, refit: str,
                           refit_share: float, use_rep: str | None, labels_obs: str | None) -> StoredModel:
    """Validate the arguments of :func:`flows.update.update` before any work; returns the store's current model
    (the one of its latest fit, which its table of results places first)."""
    from eigenflow.storage.append import pending_append
    from eigenflow.storage.results_table import placed_segments
    from eigenflow.tasks.update import REFIT_CHOICES

    check_int("n_workers", n_workers, low=1)
    check_float("max_share", max_share, low=0.0, high=1.0, low_inclusive=False)
    check_anndata_options(source, use_rep, labels_obs, None)
    check_choice("refit", refit, REFIT_CHOICES)
    check_float("refit_share", refit_share, low=0.0, low_inclusive=False)
    opened = Store.open(store, "r+", allow_incomplete=pending_append(store) is not None)
    return stored_model(opened, placed_segments(opened)[0].run)


def opened_or_url(store: str) -> str | Store:
    """The handle of the complete store at ``store`` (:func:`tasks.ingest.open_existing`), else ``store`` itself."""
    opened = open_existing(store)
    return store if opened is None else opened


def _source_rows(source: str, store: str | Store) -> int | None:
    """Rows of the source from its header (:func:`source_rows`, which refuses a source that does
    not exist or cannot be opened), or of the opened store when the source is the store itself."""
    itself = isinstance(store, Store) and same_location(source, store.url)  # the source is the opened store
    return existing_store_attrs(store).get(layout.ATTR_N) if itself else source_rows(source)


def _check_source_shape(source: str, store: str | Store, n: int | None, method: str, full: dict, *,
                        labels: str | None, holdout: float, overwrite: bool) -> None:
    """The ``n`` rows of the source against the parameters, labels against
    a supervised method; from the source's header and the labels alone, before the ingest."""
    entry = get_entry(method)
    if n is not None:
        check_rows(method, entry.fit, full, n, holdout)
    if entry.needs_labels:
        check_labeled(method, labels_of(source, store, labels, overwrite))


def check_anndata_options(source: str, use_rep: str | None, labels_obs: str | None, labels: str | None) -> None:
    """``use_rep`` / ``labels_obs`` select X and the labels of an AnnData source, and nothing else."""
    from eigenflow.storage.readers import source_kind

    for name, value in (("use_rep", use_rep), ("labels_obs", labels_obs)):
        if value is not None and (not isinstance(source, str) or source_kind(source) != "anndata"):
            raise ParameterError(f"{name} selects part of an AnnData source (.h5ad or AnnData zarr); source "
                                 f"{source!r} is not one (got {name}={value!r})")
    if labels_obs is not None and labels is not None:
        raise ParameterError(f"labels are given twice: labels={labels!r} and labels_obs={labels_obs!r}; pass one")
    if use_rep is not None or labels_obs is not None:  # the keys exist: a (scheduled) run fails now, not at ingest
        from eigenflow.storage.anndata_io import check_anndata_keys

        check_anndata_keys(source, use_rep or "X", labels_obs)


def _will_have_labels(source: str, store: str | Store, labels: str | None, overwrite: bool) -> bool:
    """Whether the run's store will hold labels: with ``labels``, when ``source`` (or the existing ``store`` that
    the ingest will reuse) is a store that has them, or when the source's header says it carries labels (an ``.npz``
    with ``y``, a folder of such partitions)."""
    if labels is not None:
        return True
    attrs = first_store_attrs((source,) if overwrite else (source, store))
    if attrs is not None:
        return bool(attrs.get(layout.ATTR_HAS_LABELS))
    from eigenflow.storage.readers import open_source

    try:
        return bool(open_source(source).has_labels)
    except Exception:  # noqa: BLE001 - an unreadable source is refused by the row check, naming it
        return False


#: The fit strategy whose kNN graph and eigensolve stages need ``n_neighbors <= n_fit - 1`` and
#: ``n_components <= n_fit - 2`` (the estimators of the other strategies clip them with a warning).
GRAPH_STRATEGY = "laplacian_eigenmaps"
#: Fewest rows any method fits (scikit-learn's minimum of two samples).
MIN_FIT_ROWS = 2


def source_rows(source: str) -> int | None:
    """Number of rows of ``source`` read from its header only (None for a CSV, whose rows are known only once
    read); a source that does not exist or cannot be opened is refused here, before any start-up
    (:class:`storage.errors.IngestError` naming it)."""
    from eigenflow.storage.readers import open_source

    return open_source(source).n_rows


def fit_rows(n: int, holdout: float) -> int:
    """Rows of a source of ``n`` rows left to the fit after the hold-out (as the flow draws it)."""
    return n - round(holdout * n)


def check_rows(method: str, fit: str, params: dict[str, Any], n: int, holdout: float) -> None:
    """Refuse parameters that the fit of ``n - round(holdout * n)`` rows cannot honour (see the module docstring).

    Raises
    ------
    ParameterError
        Too few rows to fit, or ``n_neighbors`` / ``n_components`` outside the range the rows allow.
    """
    n_fit = fit_rows(n, holdout)
    where = f"{n_fit} rows to fit (a source of {n} rows, holdout={holdout})" if n_fit != n else \
        f"a source of {n} rows"
    if n_fit < MIN_FIT_ROWS:
        after = f" ({where})" if n_fit != n else ""
        raise ParameterError(f"method {method!r} needs at least {MIN_FIT_ROWS} rows to fit; got {n_fit}{after}")
    if fit != GRAPH_STRATEGY:
        return
    _check_bounded("n_neighbors", params.get("n_neighbors"), n_fit - 1, where)
    _check_bounded("n_components", params.get("n_components"), n_fit - 2, where)


def _check_bounded(name: str, value: Any, high: int, where: str) -> None:
    """``value`` (an integer, or None: not set) must be in ``[1, high]``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and not 1 <= value <= high:
        raise ParameterError(f"{name} must be in [1, {high}] for {where}; got {value}")


def labels_of(source: str, store: Any, labels: str | None, overwrite: bool) -> tuple[np.ndarray, str] | None:
    """The run's labels and where they come from: the ``labels`` ``.npy`` file (memory-mapped), else those of
    ``source`` or of the existing ``store`` (a URL or an opened :class:`storage.store.Store`) when either is a store
    with labels; None when unknown here."""
    if labels is not None:
        if not str(labels).endswith(".npy"):
            return None  # the ingest refuses it, naming the file
        try:
            return np.load(labels, mmap_mode="r", allow_pickle=False), str(labels)
        except (OSError, ValueError):
            return None
    for candidate in with_opened((source,) if overwrite else (source, store)):
        try:
            if existing_store_attrs(candidate) is None:
                continue
        except Exception:  # noqa: BLE001 - not a store
            continue
        from eigenflow.storage.arrays import read_labels

        y = read_labels(candidate)
        return (None if y is None else (y, f"the labels of store {candidate}"))
    return None


def check_labeled(method: str, found: tuple[np.ndarray, str] | None) -> None:
    """A supervised method needs at least one labeled row (numeric label other than -1)."""
    if found is None:
        return
    y, origin = found
    if y.dtype.kind in "iuf" and y.size and not np.any(np.asarray(y) != -1):
        raise ParameterError(f"method {method!r} needs labeled rows; every one of the {y.size} labels in {origin} "
                             "is -1 (unlabeled)")
