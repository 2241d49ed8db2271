"""The stage bodies: plain functions that run on the Dask workers, reading their inputs from the store and writing
their outputs to it (no Prefect here: a worker imports the module of every function it runs). The Prefect tasks
of :mod:`tasks` submit them (:func:`tasks.dask_calls.run_on_worker`, :func:`~tasks.dask_calls.map_row_chunks`).
"""
