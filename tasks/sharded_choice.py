"""Whether a run takes the sharded path (:mod:`tasks.bodies.sharded_eigenmaps`): what that path supports, and the choice
made for ``sharded=None`` from the run's size and the workers' memory (Prefect-free; imported by the flow's
argument checks and by the CLI before any work).
"""

from __future__ import annotations

from typing import Any

from eigenflow.spectral.errors import ParameterError
from eigenflow.spectral.placement import smallest_memory_limit

from eigenflow.tasks.bodies.laplacian_eigenmaps import METHOD

#: What the sharded path supports (:func:`check_sharded`): Laplacian eigenmaps of a kNN graph, symmetric
#: normalization (any ``holdout``).
SHARDED_METHOD = METHOD


def check_sharded(method: str, params: dict) -> None:
    """Refuse a sharded run the sharded path cannot do, naming the parameter, the value it needs and the value
    received (before any work)."""
    if method != SHARDED_METHOD:
        raise ParameterError(f"sharded=True is for method {SHARDED_METHOD!r}; got method {method!r}")
    if params.get("affinity", "knn") != "knn":
        raise ParameterError(f"sharded=True needs affinity='knn'; got affinity={params.get('affinity')!r}")
    if params.get("normalization") != "symmetric":
        raise ParameterError("sharded=True needs normalization='symmetric' (the distributed solver's); got "
                             f"normalization={params.get('normalization')!r}")


def single_process_knn_bytes(n: int, d: int, k: int, itemsize: int = 4) -> int:
    """Memory of the single-process kNN stage: X (n, d) read, an NN-descent index of it
    (:func:`spectral.neighbours.index.nndescent_index_bytes`) and the graph written (n, k) int64 + float32."""
    from eigenflow.spectral.neighbours.index import nndescent_index_bytes

    return n * d * itemsize + nndescent_index_bytes(n, d, k, itemsize) + n * k * 12


def resolve_sharded(sharded: bool | None, method: str, params: dict, n: int, d: int, client: Any) -> bool:
    """Whether the run takes the sharded path (:mod:`tasks.bodies.sharded_eigenmaps`): as asked, or with ``None``
    (auto) when it can and the single-process kNN stage would need more than half the memory of the smallest
    worker (:func:`single_process_knn_bytes`)."""
    if sharded is not None:
        return sharded
    try:
        check_sharded(method, params)
    except ParameterError:
        return False
    smallest = smallest_memory_limit(client) or 0
    return smallest > 0 and single_process_knn_bytes(n, d, int(params["n_neighbors"])) > smallest / 2
