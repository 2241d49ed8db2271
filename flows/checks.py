"""The checks of a run's arguments before any work: an ``embed`` run's (:func:`check_embed_arguments`, with the
source's shape and labels from :mod:`flows.source_checks`), and an AnnData source's options."""

from __future__ import annotations

from typing import Any

from eigenflow.spectral._validation import check_float, check_int
from eigenflow.spectral.errors import ParameterError
from eigenflow.storage import layout
from eigenflow.storage.lock import check_unlocked
from eigenflow.storage.store import Store
from eigenflow.tasks.ingest import existing_store_attrs, first_store_attrs, open_existing, same_location
from eigenflow.tasks.registry import check_estimator_params, check_params, get_entry
from eigenflow.tasks.sharded_choice import check_sharded


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


def opened_or_url(store: str) -> str | Store:
    """The handle of the complete store at ``store`` (:func:`tasks.ingest.open_existing`), else ``store`` itself."""
    opened = open_existing(store)
    return store if opened is None else opened


def _source_rows(source: str, store: str | Store) -> int | None:
    """Rows of the source from its header (:func:`flows.source_checks.source_rows`, which refuses a source that does
    not exist or cannot be opened), or of the opened store when the source is the store itself."""
    from eigenflow.flows.source_checks import source_rows

    itself = isinstance(store, Store) and same_location(source, store.url)  # the source is the opened store
    return existing_store_attrs(store).get(layout.ATTR_N) if itself else source_rows(source)


def _check_source_shape(source: str, store: str | Store, n: int | None, method: str, full: dict, *,
                        labels: str | None, holdout: float, overwrite: bool) -> None:
    """The checks of :mod:`flows.source_checks`: the ``n`` rows of the source against the parameters, labels against
    a supervised method; from the source's header and the labels alone, before the ingest."""
    from eigenflow.flows.source_checks import check_labeled, check_rows, labels_of

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
    """Whether the run's store will hold labels: with ``labels``, or when ``source`` (or the existing ``store``
    that the ingest will reuse) is a store that has them."""
    if labels is not None:
        return True
    attrs = first_store_attrs((source,) if overwrite else (source, store))
    return bool(attrs.get(layout.ATTR_HAS_LABELS)) if attrs is not None else False
