"""The clustering of ``spectral_clustering`` runs by row chunks on the workers (kept free of Prefect imports).

The kNN path (:func:`fit_clusters`, the ``clustering`` stage): after the Laplacian eigenmaps stages have written the
eigenmap of the fit rows (``models/<run>``), each chunk task reads its rows of the eigenmap and keeps their clustering
features in its worker's memory; the component volumes and the Lloyd sums of k-means are per-chunk sums added here;
the k-means restarts run on a sample of rows (:func:`~spectral.cluster_assignment.kmeans_centers`). The fitted rule
is added to the model's attributes.

The landmark path (:func:`fit_landmark_clusters`, one ``fit`` stage): each chunk task keeps its fit rows' nearest
landmarks, then their features; the landmark sums (p x p) are added and solved here; k-means as above. The fitted
:class:`SpectralClustering` (landmarks and rule) is the model.

No process holds every row, except for "cluster_qr" and "discretize", whose rotation needs every feature row at once
on one worker (n x k, the size of the embedding). The labels of every row are written by the write-back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eigenflow.storage import layout
from eigenflow.storage.arrays import read_rows
from eigenflow.storage.models import ATTR_CLUSTERING, read_model_attrs, record_model_attrs
from eigenflow.storage.store import Store

#: ``attrs["method"]`` of a clustered model
METHOD = "spectral_clustering"


def _model_rows(store: Store, run: str, name: str, start: int, stop: int) -> np.ndarray:
    return read_rows(store, f"{layout.model_path(run)}/{name}", start, stop)


def component_sums(store: Store, run: str, bounds: tuple[int, int], n_components: int) -> np.ndarray:
    """Points and graph volume of each component among fit rows ``bounds`` of the eigenmap: (2, C)."""
    comp = _model_rows(store, run, "component_labels", *bounds).astype(np.int64)
    degrees = _model_rows(store, run, "degrees", *bounds).astype(np.float64)
    return np.stack([np.bincount(comp, minlength=n_components),
                     np.bincount(comp, weights=degrees, minlength=n_components)]).astype(np.float64)


def chunk_features(store: Store, run: str, bounds: tuple[int, int], rule: Any) -> np.ndarray:
    """The clustering features (m, k) of fit rows ``bounds`` of the eigenmap (:meth:`ClusterRule.features`)."""
    Z = _model_rows(store, run, "embedding", *bounds)
    return rule.features(Z, _model_rows(store, run, "component_labels", *bounds).astype(np.int64))


def _take(block: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return block[rows]


def _concatenate(*blocks: np.ndarray) -> np.ndarray:
    return np.concatenate(blocks)


def cluster_counts(V: np.ndarray, rule: Any) -> np.ndarray:
    """Rows of feature block ``V`` per cluster of the fitted ``rule``: (k,)."""
    return np.bincount(rule.labels(V), minlength=rule.n_clusters)


def _fit_rotation(rule: Any, V: np.ndarray, seed: int) -> Any:
    rule.fit_assignment(V.shape[0], None, None, np.random.default_rng(seed), n_init=1, all_rows=lambda: V)
    return rule


def fit_clusters(store: Store, run: str, *, params: dict, random_state: int | None) -> dict[str, Any]:
    """Fit the cluster rule of the eigenmap ``models/<run>`` with the :class:`SpectralClustering` parameters
    ``params`` on the cluster's workers, and record it in the model (which then restores as a fitted
    :class:`SpectralClustering`, :func:`tasks.bodies.stored_model.load_fitted`). Returns the chosen k, the eigengap
    of ``n_clusters="auto"``, the Lloyd passes and the cluster sizes of the fit rows."""
    from distributed import worker_client

    from eigenflow.spectral._validation import check_random_state
    from eigenflow.spectral.cluster_assignment import ClusterRule, choose_columns
    from eigenflow.storage.arrays import chunk_rows

    model_path = layout.model_path(run)
    values = read_rows(store, f"{model_path}/component_eigenvalues")
    offsets = read_rows(store, f"{model_path}/component_offsets").astype(np.float64)
    n = _n_rows(store, run)
    step = chunk_rows(store)
    parts = [(s, min(s + step, n)) for s in range(0, n, step)]
    rng = check_random_state(random_state)
    with worker_client() as client:  # this task leaves its worker's thread to the chunk tasks while it waits
        sizes, volumes = sum(client.gather(client.map(component_sums, [store] * len(parts), [run] * len(parts),
                                                      parts, n_components=values.shape[0])))
        columns, k, eigengap = choose_columns(values, sizes, _requested(params), int(params["max_clusters"]))
        rule = ClusterRule(columns, volumes, offsets, params["assign_labels"])
        blocks = client.map(chunk_features, [store] * len(parts), [run] * len(parts), parts, rule=rule)
        rule, info = fit_rule_on_blocks(client, rule, blocks, [b - a for a, b in parts], params, rng)
    record_model_attrs(store, run, {"method": METHOD, ATTR_CLUSTERING: {
        "rule": rule.to_attrs(), "params": dict(params), "eigengap": eigengap,
        "lloyd_iterations": info["lloyd_iterations"]}})
    return {"n_clusters": k, "eigengap": eigengap, **info}


def _requested(params: dict) -> int | None:
    return None if params["n_clusters"] == "auto" else int(params["n_clusters"])


def fit_rule_on_blocks(client: Any, rule: Any, blocks: list, sizes: list[int], params: dict,
                       rng: np.random.Generator) -> tuple[Any, dict]:
    """Fit the assignment of ``rule`` on the feature rows held by the futures ``blocks`` (``sizes`` rows each, in
    order) and count the rows of each cluster: ``(fitted rule, {"lloyd_iterations", "cluster_sizes"})``. k-means:
    restarts on a sample gathered from the blocks, Lloyd sums added over them; the rotations: every block
    concatenated on one worker."""
    from eigenflow.spectral.cluster_assignment import lloyd_sums

    starts = np.concatenate([[0], np.cumsum(sizes)])

    def take_rows(rows: np.ndarray) -> np.ndarray:
        taken = [client.submit(_take, block, rows[(rows >= a) & (rows < b)] - a)
                 for block, a, b in zip(blocks, starts[:-1], starts[1:])]
        return np.concatenate(client.gather(taken))

    def lloyd(centers: np.ndarray) -> tuple:
        sums = client.gather(client.map(lloyd_sums, blocks, centers=centers, pure=False))
        return tuple(sum(part[i] for part in sums) for i in range(3))

    if rule.assign_labels == "kmeans":
        n_iter = rule.fit_assignment(int(starts[-1]), take_rows, lloyd, rng, n_init=int(params["n_init"]))
    else:
        whole = client.submit(_concatenate, *blocks)
        rule = client.submit(_fit_rotation, rule, whole, int(rng.integers(0, 2**31 - 1))).result()
        n_iter = 0
    counts = np.sum(client.gather(client.map(cluster_counts, blocks, rule=rule)), axis=0)
    return rule, {"lloyd_iterations": n_iter, "cluster_sizes": [int(c) for c in counts]}


# ---- the landmark path -----------------------------------------------------------------------------------------
def _fit_chunk(store: Store, bounds: tuple[int, int], rows: np.ndarray) -> np.ndarray:
    """The fit rows ``rows`` (absolute, sorted) of X's rows ``bounds``."""
    from eigenflow.storage.arrays import read_X

    a, b = bounds
    return read_X(store, a, b)[rows[(rows >= a) & (rows < b)] - a]


def chunk_landmarks(store: Store, bounds: tuple[int, int], rows: np.ndarray, model: Any) -> tuple:
    """The K nearest landmarks (distances, indices) of the fit rows of X's rows ``bounds``."""
    return model.nearest(_fit_chunk(store, bounds, rows))


def _graph_sums(neighbours: tuple, model: Any) -> tuple:
    return model.graph_sums(*neighbours)


def _landmark_features(neighbours: tuple, model: Any, rule: Any) -> np.ndarray:
    Z = model.place(*neighbours)
    return rule.features(Z, rule.component_of(Z))


def fit_landmark_clusters(store: Store, run: str, *, method: str, params: dict, holdout: float,
                          random_state: int | None) -> dict[str, Any]:
    """``affinity="landmarks"``: the landmark graph of the fit rows and its cluster rule, by row chunks on the
    workers; the fitted :class:`SpectralClustering` written to ``models/<run>`` (every row is then labelled by its
    ``predict``). The landmarks and sigma come from rows drawn from the fit rows; each chunk task keeps its rows'
    nearest landmarks, then their features, in its worker's memory; the landmark sums (p x p) are added here and
    solved (:class:`spectral.embedding.transfer_cut.TransferCutModel`)."""
    from distributed import worker_client

    from eigenflow.spectral._validation import check_random_state
    from eigenflow.spectral.cluster_assignment import ClusterRule, choose_columns
    from eigenflow.spectral.embedding.transfer_cut import TransferCutModel
    from eigenflow.storage.arrays import read_rows_at, row_chunks, x_shape
    from eigenflow.tasks.bodies.estimator_fit import write_estimator
    from eigenflow.tasks.bodies.fit_rows import fit_rows_for
    from eigenflow.tasks.registry import get_entry, make_estimator

    n_all, d = x_shape(store)
    rows = fit_rows_for(n_all, holdout, random_state)
    rng = check_random_state(random_state)
    est = make_estimator(get_entry(method), params)
    n_components = est.eigenmap_params(rows.size)["n_components"]
    model = TransferCutModel.start(rows.size, lambda r: read_rows_at(store, layout.X, rows[r]),
                                   n_landmarks=int(params["n_landmarks"]),
                                   n_neighbors=int(params["n_landmark_neighbors"]), rng=rng)
    chunks = [c for c in row_chunks(store) if np.any((rows >= c[0]) & (rows < c[1]))]
    with worker_client() as client:
        fit_rows = client.scatter(rows, broadcast=True)  # once per worker, not once per task
        near = client.map(chunk_landmarks, [store] * len(chunks), chunks, rows=fit_rows, model=model)
        E, dy, links = (sum(part) for part in zip(*client.gather(client.map(_graph_sums, near, model=model))))
        model.solve(E, dy, links > 0, n_components)
        sizes, volumes = model.part_sizes()
        columns, k, eigengap = choose_columns(model.component_eigenvalues, sizes, _requested(params),
                                              int(params["max_clusters"]))
        rule = ClusterRule(columns, volumes, model.component_offsets, params["assign_labels"])
        blocks = client.map(_landmark_features, near, model=model, rule=rule)
        del near
        counts = [int(np.count_nonzero((rows >= a) & (rows < b))) for a, b in chunks]
        rule, info = fit_rule_on_blocks(client, rule, blocks, counts, params, rng)
    write_estimator(store, run, method, type(est).from_eigenmap(model, rule, params, d, eigengap), rows)
    return {"n_fit": int(rows.size), "n_clusters": k, "eigengap": eigengap, "n_landmarks": model.landmarks.shape[0],
            "sigma": model.sigma, **info}


def _n_rows(store: Store, run: str) -> int:
    from eigenflow.storage.store import as_group, get_node

    return int(get_node(as_group(store, "r"), f"{layout.model_path(run)}/embedding").shape[0])


def clustered(store: Store, run: str) -> bool:
    """Whether the model of ``run`` holds a fitted cluster rule (a resumed run skips the clustering stage)."""
    from eigenflow.storage.models import model_complete

    return model_complete(store, run) and ATTR_CLUSTERING in read_model_attrs(store, run)
