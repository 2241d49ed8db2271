"""A model's kNN index kept on the Dask cluster between runs, so that the runs that map new rows with the model
(``update``, ``extend``) do not build it again from the fit rows each time.

The index of a Laplacian eigenmaps model (its out-of-sample map queries the fit rows' kNN index) is a Dask
future published on the scheduler under :func:`tasks.bodies.laplacian_eigenmaps.model_index_name` (the store, the
run and its start time). An ``embed`` run's kNN stage publishes the index it built; the runs after it find it there
while the cluster lives. Kept only when the flow's ``keep_index`` says so, by default on a cluster that outlives the
run (an external scheduler, ``serve``'s kept cluster: :func:`flows.cluster.keeps_index`); a run's own local cluster
closes with it. At most one model index per store is kept (the one fitted or built last), so a served schedule's
memory does not grow with its refits. If the worker holding it dies, the scheduler builds it again (the published
key is wanted); if the scheduler restarts, the next run builds it.
"""

from __future__ import annotations

from typing import Any

from eigenflow.storage.models import read_model_attrs
from eigenflow.storage.store import Store

from eigenflow.tasks.bodies import laplacian_eigenmaps as le
from eigenflow.tasks.bodies.stage_handoff import drop_run
from eigenflow.tasks.bodies.stored_model import model_fit_index
from eigenflow.tasks.dask_calls import publish_future, published_future, submit_to_worker, unpublish


model_index_name = le.model_index_name  # the name of a model's published index, for the flows


def model_index(store: Store, run: str, started: str, *, keep: bool) -> tuple[Any, str]:
    """``(future, how)``: the kNN index of the model of ``run`` (started at ``started``) of ``store``.

    ``how`` says where it comes from: ``"kept"``, the one kept on the cluster; ``"built"``, none was kept and
    ``keep`` is set: built now by a Dask task (:func:`tasks.bodies.stored_model.model_fit_index`) and kept for later
    runs; ``"rebuilt"``: the future is None, and the write-back rebuilds the index for this run only (always for
    models whose map is not a Laplacian eigenmap's kNN map, e.g. TSK / RSK, which restore their own).
    """
    if read_model_attrs(store, run).get("state") != le.MODEL_STATE:
        return None, "rebuilt"
    name = le.model_index_name(store, run, started)
    index = published_future(name)
    if index is not None:
        return index, "kept"
    if not keep:
        return None, "rebuilt"
    index = submit_to_worker(model_fit_index, store, run, name=f"model-index-{run}")
    publish_future(index, name)
    drop_other_indexes(store, name)
    return index, "built"


def drop_other_indexes(store: Store, name: str) -> None:
    """Unpublish every model index of ``store`` kept on the cluster except ``name``: one per store."""
    from distributed import get_client

    client = get_client()
    prefix = le.store_index_prefix(store)
    for other in client.list_datasets():
        if isinstance(other, str) and other.startswith(prefix) and other != name:
            unpublish(other, client)


def release_index(store: Store, name: str, run: str, *, keep: bool) -> None:
    """End of an ``embed`` run: with ``keep`` (a completed run on a cluster that outlives it) its index ``name`` stays
    published and replaces the store's older ones; otherwise it is dropped. Any stage handoff the run left (a
    failed run) is dropped from every worker."""
    from distributed import get_client

    if keep:
        drop_other_indexes(store, name)
    else:
        unpublish(name)
    # on every worker; one that cannot answer (dying, restarting) holds nothing after it: not an error here, where
    # it would hide the run's own error
    get_client().run(drop_run, run, on_error="ignore")
