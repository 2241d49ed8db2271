"""Thin Prefect tasks: an opened store (:class:`storage.store.Store`) and parameters in, small metadata out.

The math lives in :mod:`spectral`, every read and write in :mod:`storage`. Importing this package applies
the Prefect / Dask environment defaults of :mod:`tasks._env` (``setdefault`` only) before Prefect loads.
"""

from eigenflow.tasks._env import apply_env_defaults

apply_env_defaults()
