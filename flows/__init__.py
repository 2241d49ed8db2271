"""Prefect flows of eigenflow: they sequence tasks, own the Dask client and expose the CLI (``eigenflow``).

Importing :mod:`tasks` first applies the Prefect / Dask environment defaults before Prefect loads.
"""

import eigenflow.tasks  # noqa: F401  (applies environment defaults)
