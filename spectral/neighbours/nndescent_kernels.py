"""pynndescent's NN-descent build, compiled once per machine: :class:`CachedNNDescent`.

pynndescent compiles its NN-descent loop (``pynndescent_.nn_descent`` and what it calls, a long compile) in
every new process, because numba cannot cache it, for two reasons:

- the distance function is an argument, and numba lowers a jitted function passed as a value to its address in
  the running process (a "dynamic global"), which makes the compiled code uncacheable;
- ``numba.get_num_threads()`` inside jitted code is implemented through a ctypes function pointer, another
  dynamic global.

This module compiles the same pynndescent code in a form numba can cache (:mod:`.jit_cache`):

- one :func:`~spectral.neighbours.jit_cache.cached_njit` entry point per distance (:data:`DISTANCES`), whose distance is
  a module global wrapped in :class:`_BoundDistance`: typed as a subclass of numba's dispatcher type whose
  constant lowers to nothing (calls through it are resolved at compile time, as for any global jitted function);
- ``nn_descent`` and ``nn_descent_internal`` recompiled from pynndescent's own bytecode with ``numba`` in their
  globals replaced by a namespace whose ``get_num_threads`` is numba's linked intrinsic (the form parallel
  kernels use; the same value at run time).

:class:`CachedNNDescent` is ``pynndescent.NNDescent`` whose ``__init__`` (pynndescent's own code) calls that
cached loop; everything else (forest, search graph, queries, pickling) is pynndescent's, whose other kernels
pynndescent caches itself. The graphs are identical to ``NNDescent``'s (tested). A metric outside
:data:`DISTANCES` (none of eigenflow's) runs pynndescent's uncached loop.

The cache entries are salted with pynndescent's version and a hash of its source files, so an upgraded
pynndescent never loads code compiled from another version. Tested with pynndescent 0.7.0 and numba 0.68
(pyproject pins the pynndescent minor version this depends on).
"""

from __future__ import annotations

import types as pytypes
from pathlib import Path

import numba
import pynndescent
import pynndescent.pynndescent_ as _pnd
from numba.core import types as nb_types
from numba.core.datamodel import models, register_default
from numba.core.imputils import lower_constant
from numba.extending import typeof_impl
from numba.np.ufunc.parallel import _iget_num_threads
from pynndescent import distances as _distances

from eigenflow.spectral.neighbours.jit_cache import cached_njit, source_digest

#: Salt of the cache entries: pynndescent's version and the hash of its sources (compiled into the kernels).
PYNNDESCENT_SALT = f"pynndescent {pynndescent.__version__} " + source_digest(
    *sorted(Path(pynndescent.__file__).parent.glob("*.py")))


class _BoundDistanceType(nb_types.Dispatcher):
    """numba type of a :class:`_BoundDistance`: a jitted function known at compile time, passed as a value that
    carries nothing (so no process address is compiled in)."""

    def __init__(self, dispatcher):
        self._store_object(dispatcher)
        func = dispatcher.py_func
        nb_types.Callable.__init__(self, f"BoundDistance({func.__module__}.{func.__qualname__})")


register_default(_BoundDistanceType)(models.OpaqueModel)


@lower_constant(_BoundDistanceType)
def _lower_bound_distance(context, builder, ty, pyval):
    return context.get_dummy_value()


class _BoundDistance:
    """A pynndescent distance function as a global constant of a cached kernel."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher


@typeof_impl.register(_BoundDistance)
def _typeof_bound_distance(value, context):
    return _BoundDistanceType(value.dispatcher)


def _threads_namespace() -> pytypes.ModuleType:
    """Stands for ``numba`` in the recompiled functions: only ``get_num_threads`` is used, as the intrinsic."""
    namespace = pytypes.ModuleType("eigenflow_numba_threads")
    namespace.get_num_threads = _iget_num_threads
    return namespace


def _recompiled(dispatcher, **globals_):
    """A new (uncached) numba dispatcher of ``dispatcher``'s Python function, its globals overridden by
    ``globals_``; numba options as the original's."""
    func = dispatcher.py_func
    missing = set(globals_) - set(func.__code__.co_names)
    if missing:
        raise ImportError(f"pynndescent {pynndescent.__version__}: {func.__qualname__} no longer uses "
                          f"{sorted(missing)}; eigenflow's cached NN-descent supports pynndescent 0.7.x")
    clone = pytypes.FunctionType(func.__code__, dict(func.__globals__, **globals_), func.__name__,
                                 func.__defaults__, func.__closure__)
    clone.__kwdefaults__ = func.__kwdefaults__
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    return numba.njit(**options)(clone)


_threads = _threads_namespace()
_nn_descent_internal = _recompiled(_pnd.nn_descent_internal, numba=_threads)
_nn_descent = _recompiled(_pnd.nn_descent, numba=_threads, nn_descent_internal=_nn_descent_internal)

_SQUARED_EUCLIDEAN = _BoundDistance(_distances.squared_euclidean)
_ALTERNATIVE_DOT = _BoundDistance(_distances.alternative_dot)
_MANHATTAN = _BoundDistance(_distances.manhattan)


@cached_njit(salt=PYNNDESCENT_SALT)
def _nn_descent_squared_euclidean(data, n_neighbors, rng_state, max_candidates, n_iters, delta, init_graph,
                                  rp_tree_init, leaf_array, low_memory, verbose, kernel):  # pragma: no cover
    return _nn_descent(data, n_neighbors, rng_state, max_candidates, _SQUARED_EUCLIDEAN, n_iters, delta, init_graph,
                       rp_tree_init, leaf_array, low_memory, verbose, kernel)


@cached_njit(salt=PYNNDESCENT_SALT)
def _nn_descent_alternative_dot(data, n_neighbors, rng_state, max_candidates, n_iters, delta, init_graph,
                                rp_tree_init, leaf_array, low_memory, verbose, kernel):  # pragma: no cover
    return _nn_descent(data, n_neighbors, rng_state, max_candidates, _ALTERNATIVE_DOT, n_iters, delta, init_graph,
                       rp_tree_init, leaf_array, low_memory, verbose, kernel)


@cached_njit(salt=PYNNDESCENT_SALT)
def _nn_descent_manhattan(data, n_neighbors, rng_state, max_candidates, n_iters, delta, init_graph,
                          rp_tree_init, leaf_array, low_memory, verbose, kernel):  # pragma: no cover
    return _nn_descent(data, n_neighbors, rng_state, max_candidates, _MANHATTAN, n_iters, delta, init_graph,
                       rp_tree_init, leaf_array, low_memory, verbose, kernel)


#: pynndescent distance function -> its cached NN-descent loop: the distances eigenflow's metrics use
#: (euclidean -> squared_euclidean, cosine -> alternative_dot on normalised rows, manhattan).
DISTANCES = {
    _distances.squared_euclidean: _nn_descent_squared_euclidean,
    _distances.alternative_dot: _nn_descent_alternative_dot,
    _distances.manhattan: _nn_descent_manhattan,
}


def nn_descent(data, n_neighbors, rng_state, max_candidates=50, dist=_distances.euclidean, n_iters=10, delta=0.001,
               init_graph=_pnd.EMPTY_GRAPH, rp_tree_init=True, leaf_array=None, low_memory=True, verbose=False,
               kernel=0):
    """``pynndescent.pynndescent_.nn_descent`` (same parameters and result: the ``(indices (n, k) int32,
    distances (n, k) float32)`` of the sorted heap), through the cached loop of ``dist`` when there is one."""
    loop = DISTANCES.get(dist)
    if loop is None:
        return _pnd.nn_descent(data, n_neighbors, rng_state, max_candidates, dist, n_iters, delta, init_graph,
                               rp_tree_init, leaf_array, low_memory, verbose, kernel)
    return loop(data, n_neighbors, rng_state, max_candidates, n_iters, delta, init_graph, rp_tree_init, leaf_array,
                low_memory, verbose, kernel)


def _init_calling_cached_loop():
    """``NNDescent.__init__`` (pynndescent's code) with ``nn_descent`` bound to this module's :func:`nn_descent`."""
    init = _pnd.NNDescent.__init__
    if "nn_descent" not in init.__code__.co_names:
        raise ImportError(f"pynndescent {pynndescent.__version__}: NNDescent.__init__ no longer calls nn_descent; "
                          "eigenflow's cached NN-descent supports pynndescent 0.7.x")
    clone = pytypes.FunctionType(init.__code__, dict(init.__globals__, nn_descent=nn_descent), init.__name__,
                                 init.__defaults__, init.__closure__)
    clone.__kwdefaults__ = init.__kwdefaults__
    clone.__doc__ = init.__doc__
    return clone


class CachedNNDescent(_pnd.NNDescent):
    """``pynndescent.NNDescent`` (same parameters, attributes and results) whose NN-descent loop loads from
    eigenflow's compiled-code cache instead of compiling in every process."""

    __init__ = _init_calling_cached_loop()
