"""The ``eigenflow`` command line (typer): ingest, methods, embed, extend, serve, export, info, verify, warm, demo.

Every failure ends with one line on stderr and a non-zero exit status, without a traceback: a user error (bad
parameters, bad input data, a missing or damaged store) ``error: <message>`` and status 1; a stop
(:mod:`flows.stops`: SIGINT / SIGTERM, status 130 / 143; a lost Prefect API, status 1) a line that says what the
store records of the run and how to resume it. ``--verbose`` shows Prefect's and Dask's logs.

A command that runs a flow starts what the flow needs at once, side by side, while it checks its arguments:
Prefect's local server (without ``PREFECT_API_URL``, :class:`flows.prefect_api.LocalServer`) and, without a
scheduler, the local Dask cluster, whose address the flow receives as its ``scheduler`` (:class:`flows._cli_infrastructure.Infrastructure`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from eigenflow.flows._cli_display import (drift_text, info_renderables, result_rows, stop_line, summary_table,
                                          with_progress, with_resume_hint)
from eigenflow.flows._cli_infrastructure import flow_infrastructure

app = typer.Typer(name="eigenflow", add_completion=False, no_args_is_help=True,
                  help="Spectral embeddings of large datasets: Prefect flows on Dask over zarr stores.")
out = Console()
err = Console(stderr=True)

#: Exit code of a failed command.
EXIT_FAILURE = 1


class Reported(Exception):
    """A failure whose line has been printed: the console script ends with :attr:`exit_code`."""

    def __init__(self, exit_code: int):
        super().__init__(exit_code)
        self.exit_code = exit_code


def main() -> None:
    """The console script: the typer app under :func:`flows.stops.stop_on_signals`, every end one line at most."""
    import click

    from eigenflow.flows.stops import stop_on_signals

    with stop_on_signals() as received:
        reported = True
        try:
            code = app(standalone_mode=False)
            reported = False
        except Reported as done:
            code = done.exit_code
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except click.Abort:
            code = EXIT_FAILURE
    import signal

    if not reported and code == 130 and received.signum is not None:  # a stop typer made a bare 130 of
        err.print(f"[bold red]error:[/] interrupted ({signal.Signals(received.signum).name})", highlight=False)
        code = 128 + received.signum
    finishing()
    sys.exit(code or 0)


def finishing() -> None:
    """The command is over (its summary or its one line printed): a first stop signal during the interpreter's exit
    (Prefect's local server stopped, threads joined) lets that exit finish instead of interrupting it with a
    traceback; a second one ends the process at once (the default action)."""
    import signal

    from eigenflow.flows.stops import STOP_SIGNALS

    def second_ends(signum: int, frame: Any) -> None:
        for stop in STOP_SIGNALS:
            signal.signal(stop, signal.SIG_DFL)

    for stop in STOP_SIGNALS:
        signal.signal(stop, second_ends)


#: The commands that run a flow: Prefect's local server is launched as soon as one of them is chosen.
FLOW_COMMANDS = ("embed", "extend", "update", "demo")


@app.callback()
def options(ctx: typer.Context,
            verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Prefect and Dask logs.")) -> None:
    """eigenflow: ingest data into zarr stores, embed it, extend embeddings to new points."""
    from eigenflow.tasks._env import apply_cli_env

    apply_cli_env(verbose)
    if ctx.invoked_subcommand in FLOW_COMMANDS and not os.environ.get("PREFECT_API_URL"):
        from eigenflow.flows.prefect_api import LocalServer

        ctx.obj = LocalServer()  # its start overlaps the command's checks, imports and cluster start


def _user_errors() -> tuple[type[BaseException], ...]:
    """The exception classes reported as one-line errors (storage faults, OSError, included: a read-only or full
    disk, a missing file end in one line naming the path)."""
    from eigenflow.spectral.errors import EigenflowError
    from eigenflow.storage.errors import StorageError

    errors: list[type[BaseException]] = [EigenflowError, StorageError, ValueError, OSError]
    for module, name in (("prefect.exceptions", "ParameterTypeError"), ("eigenflow.flows.cluster", "WorkerCodeError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


def _fail(message: str, exit_code: int = EXIT_FAILURE) -> Reported:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return Reported(exit_code)


def _run(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; a user error becomes ``error: <message>`` on stderr and exit status 1."""
    try:
        return fn()
    except _user_errors() as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _fail(message) from None


def _run_flow(store: str, run: str, fn: Callable[[], Any]) -> Any:
    """Call ``fn`` (a flow run ``run`` writing into ``store``) with the stage progress on stderr: a user error as
    in :func:`_run`; a stop (:mod:`flows.stops`) as one line saying what the store records of the run."""
    from eigenflow.flows.stops import RunStopped, stop_of

    try:
        return _run(lambda: with_resume_hint(store, run, lambda: with_progress(err, fn)))
    except BaseException as exc:
        stop = exc if isinstance(exc, RunStopped) else None if isinstance(exc, Reported) else stop_of(exc)
        if stop is None:
            raise
        raise _fail(stop_line(stop, store, run), stop.exit_code) from None


# AnnData sources (`ingest` and `embed`): X's representation and the labels' obs column.
USE_REP_OPT = typer.Option(None, "--use-rep", help="AnnData source: X from 'X' (default) or this obsm key, e.g. X_pca")
LABELS_OBS_OPT = typer.Option(None, "--labels-obs", help="AnnData source: labels from this obs column (categorical "
                                                         "or string; missing = unlabeled)")


@app.command()
def ingest(
    source: str = typer.Argument(..., help=".npy / .npz / .csv / .parquet / .h5ad file, file.h5:/group/dataset "
                                           "or zarr store"),
    store: str = typer.Argument(..., help="eigenflow store to create (local path or URL)"),
    labels: Optional[str] = typer.Option(None, help=".npy file of integer labels (-1 = unlabeled)"),
    chunk_rows: Optional[int] = typer.Option(None, help="rows per chunk"),
    overwrite: bool = typer.Option(False, help="replace an existing store"),
    use_rep: Optional[str] = USE_REP_OPT, labels_obs: Optional[str] = LABELS_OBS_OPT,
) -> None:
    """Ingest SOURCE into a chunked zarr STORE (validated, streamed chunk by chunk)."""
    from eigenflow.storage.ingest import ingest as ingest_store  # plain storage call: no Prefect needed

    keys = {"x_key": use_rep or "X", "labels_key": labels_obs or "auto"}
    result = _run(lambda: ingest_store(source, store, labels=labels, chunk_rows=chunk_rows,
                                       overwrite=overwrite, **keys).to_dict())
    table = Table(title=f"store {store}")
    table.add_column("field")
    table.add_column("value")
    for key in ("n", "d", "chunk_rows", "dtype", "has_labels", "fingerprint", "seconds"):
        if key in result:
            table.add_row(key, f"{result[key]:.2f}" if key == "seconds" else str(result[key]))
    out.print(table)


def parse_params(pairs: list[str], n_components: int | None = None) -> dict[str, Any]:
    """``["gamma=0.5", "mode=kernel"]`` -> ``{"gamma": 0.5, "mode": "kernel"}``, with ``n_components`` (``-k``).

    Values are read as JSON when they parse (numbers, true/false, null, lists, objects), else kept as strings.
    """
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-p/--param must look like NAME=VALUE; got {pair!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        params[key.strip().replace("-", "_")] = value
    if n_components is not None:
        if "n_components" in params:
            raise ValueError("n_components is given twice: use either -k or -p n_components=...")
        params["n_components"] = n_components
    return params


# Options shared by `embed` and `serve` (one declaration each).
SOURCE_ARG = typer.Argument(..., help="file or eigenflow store with the points")
METHOD_OPT = typer.Option("laplacian_eigenmaps", "--method", "-m", help="method (see `eigenflow methods`)")
PARAM_OPT = typer.Option([], "--param", "-p", help="method parameter NAME=VALUE (repeatable)")
K_OPT = typer.Option(None, "--n-components", "-k", help="embedding dimension (the method's n_components)")
LABELS_OPT = typer.Option(None, help=".npy file of labels ingested with the points (-1 = unlabeled)")
HOLDOUT_OPT = typer.Option(0.0, help="fraction of points left out of the fit and mapped out-of-sample")
# Options of every command that runs a flow.
SCHEDULER_OPT = typer.Option(None, envvar="EIGENFLOW_SCHEDULER", help="Dask scheduler address")
WORKERS_OPT = typer.Option(2, help="local Dask workers (without --scheduler)")
RUN_NAME_OPT = typer.Option(None, help="run id (reuse a failed run's id to resume it)")


@app.command()
def embed(
    ctx: typer.Context,
    source: str = SOURCE_ARG,
    store: str = typer.Argument(..., help="eigenflow store to write (the source itself to skip the ingest)"),
    method: str = METHOD_OPT, param: list[str] = PARAM_OPT, n_components: Optional[int] = K_OPT,
    labels: Optional[str] = LABELS_OPT, holdout: float = HOLDOUT_OPT,
    use_rep: Optional[str] = USE_REP_OPT, labels_obs: Optional[str] = LABELS_OBS_OPT,
    seed: int = typer.Option(0, help="random seed of the run"),
    scheduler: Optional[str] = SCHEDULER_OPT, workers: int = WORKERS_OPT,
    run_name: Optional[str] = RUN_NAME_OPT,
    chunk_rows: Optional[int] = typer.Option(None, help="rows per chunk of the store"),
    overwrite: bool = typer.Option(False, help="re-ingest SOURCE over an existing STORE"),
    overwrite_run: bool = typer.Option(False, "--overwrite-run", help="start --run-name again from nothing instead "
                                       "of resuming it (e.g. when its manifest cannot be read)"),
    sharded: Optional[bool] = typer.Option(None, "--sharded/--no-sharded", help="laplacian_eigenmaps: kNN graph, "
                                           "Laplacian and eigensolve split by rows over the workers (default: "
                                           "when one worker's memory is too small for the single-process kNN)"),
) -> None:
    """Embed the points of SOURCE into STORE with any method (ingest, fit, every point written back)."""
    from eigenflow.tasks.checks import check_embed_arguments
    from eigenflow.flows.run import new_run_id
    from eigenflow.storage.lock import store_lock

    params = _run(lambda: parse_params(param, n_components))
    run = _run(lambda: new_run_id("embed", run_name))  # named here: the stop line says how to resume it
    with contextlib.ExitStack() as held:
        _run(lambda: held.enter_context(store_lock(store, run)))  # first: a second run on the store is refused at once
        _run(lambda: check_embed_arguments(source, store, method, params, labels=labels, holdout=holdout,
                                           n_workers=workers, random_state=seed, overwrite=overwrite, sharded=sharded,
                                           use_rep=use_rep, labels_obs=labels_obs, run=run))  # before any start-up
        infrastructure = held.enter_context(flow_infrastructure(ctx, scheduler, workers))
        address = _run(infrastructure.ready)
        from eigenflow.flows.embed import embed as embed_flow

        summary = _run_flow(store, run, lambda: embed_flow(
            source, store, method=method, params=params, labels=labels, holdout=holdout, random_state=seed,
            scheduler=address, n_workers=workers, run_name=run, chunk_rows=chunk_rows, overwrite=overwrite,
            sharded=sharded, overwrite_run=overwrite_run, use_rep=use_rep, labels_obs=labels_obs,
            keep_index=scheduler is not None))  # the CLI's own cluster stops with the command
    out.print(summary_table(summary, result_rows(store, summary["results"])))


@app.command()
def serve(
    source: str = SOURCE_ARG,
    store: str = typer.Argument(..., help="eigenflow store every scheduled run writes into"),
    cron: Optional[str] = typer.Option(None, help="cron schedule, e.g. '0 2 * * *'"),
    interval: Optional[float] = typer.Option(None, help="schedule every SECONDS"),
    name: str = typer.Option("nightly", help="deployment name: embed/NAME and extend/NAME-extend"),
    method: str = METHOD_OPT, param: list[str] = PARAM_OPT, n_components: Optional[int] = K_OPT,
    labels: Optional[str] = LABELS_OPT, holdout: float = HOLDOUT_OPT,
    use_rep: Optional[str] = USE_REP_OPT, labels_obs: Optional[str] = LABELS_OBS_OPT,
    scheduler: Optional[str] = SCHEDULER_OPT, workers: int = WORKERS_OPT,
    keep_cluster: bool = typer.Option(True, help="keep one warm local Dask cluster up between runs"),
    flow: str = typer.Option("update", help="scheduled flow: update (the new rows of a growing source placed, "
                                            "refits by --refit) or embed (a full fit every run)"),
    refit: str = typer.Option("auto", help="update: refit every row when the policy says so (auto), never, or always"),
) -> None:
    """Serve the update (or embed) flow on a schedule and extend on demand as Prefect deployments (PREFECT_API_URL)."""
    from eigenflow.flows.serve import serve as serve_flows

    params = _run(lambda: parse_params(param, n_components))
    _run(lambda: serve_flows(source, store, name=name, method=method, params=params, labels=labels, holdout=holdout,
                             interval=interval, cron=cron, scheduler=scheduler, n_workers=workers,
                             keep_cluster=keep_cluster, use_rep=use_rep, labels_obs=labels_obs, flow=flow,
                             refit=refit))


@app.command()
def update(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="the growing source STORE was ingested from (folder, glob or array)"),
    store: str = typer.Argument(..., help="eigenflow store with a model written by `eigenflow embed`"),
    seed: int = typer.Option(0, help="random seed of the drift samples"),
    scheduler: Optional[str] = SCHEDULER_OPT, workers: int = WORKERS_OPT,
    run_name: Optional[str] = RUN_NAME_OPT,
    max_share: float = typer.Option(0.05, help="drift flag: share of new rows beyond the fit's q0.99 distance"),
    refit: str = typer.Option("auto", help="refit every row when the policy says so (auto), never, or always"),
    refit_share: float = typer.Option(0.25, help="auto: refit at this share of rows mapped since the last fit"),
    use_rep: Optional[str] = USE_REP_OPT, labels_obs: Optional[str] = LABELS_OBS_OPT,
) -> None:
    """Append the new rows of SOURCE to STORE and place them with its current model; report their drift."""
    from eigenflow.flows.run import new_run_id

    run = _run(lambda: new_run_id("update", run_name))  # named here: the stop line says how to resume it
    with flow_infrastructure(ctx, scheduler, workers) as infrastructure:
        address = _run(infrastructure.ready)
        from eigenflow.flows.update import update as update_flow

        summary = _run_flow(store, run, lambda: update_flow(
            source, store, scheduler=address, n_workers=workers, run_name=run, use_rep=use_rep,
            labels_obs=labels_obs, random_state=seed, max_share=max_share, refit=refit, refit_share=refit_share,
            keep_index=scheduler is not None))
    results = summary["results"]
    out.print(summary_table(summary, {"model": results.get("model_run"), "new rows": results.get("n_new"),
                                      "points": results.get("n"), "drift": drift_text(results.get("drift")),
                                      "refit": results["refit"]["reason"]}))


@app.command()
def methods(as_json: bool = typer.Option(False, "--json", help="print the list as JSON")) -> None:
    """List every method with its parameters and defaults, and whether it needs labels."""
    from eigenflow.tasks.registry import REGISTRY

    described = [entry.describe() for entry in REGISTRY.values()]
    if as_json:
        sys.stdout.write(json.dumps(described, indent=2) + "\n")
        return
    table = Table(title="methods (eigenflow embed SOURCE STORE --method NAME -p PARAM=VALUE)")
    for col in ("method", "labels", "outputs", "parameters (defaults)"):
        table.add_column(col)
    for d in described:
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in d["parameters"].items())
        table.add_row(d["name"], "needed" if d["needs_labels"] else "optional", ", ".join(d["outputs"]), params)
    out.print(table)


@app.command()
def export(
    store: str = typer.Argument(..., help="eigenflow store"),
    out_file: str = typer.Argument(..., metavar="OUT", help="file to write: .npy or .parquet; or an .h5ad file "
                                                            "or AnnData zarr directory of the store's cells to add "
                                                            "the results to"),
    run: Optional[str] = typer.Option(None, help="run (default: the latest completed run with results)"),
    output: str = typer.Option("embedding", help="embedding | labels | scores | in_fit | held_out"),
    overwrite: bool = typer.Option(False, help="replace an existing OUT (AnnData: existing keys)"),
    obsm: str = typer.Option("X_eigenflow", "--obsm", help="AnnData: obsm key of the embedding (labels: obs "
                                                           "KEY_labels, scores: obsm KEY_scores)"),
    copy_to: Optional[str] = typer.Option(None, "--out", help="AnnData: write a copy with the results to this file "
                                                              "(.h5ad) or directory (.zarr) instead of adding them "
                                                              "to OUT"),
) -> None:
    """Write one per-point result of a run (one row per point of the store, in order) to OUT, or every per-point
    result of the run into the AnnData file OUT (.h5ad, or an AnnData zarr directory)."""
    from eigenflow.storage.anndata_io import is_anndata_zarr

    if out_file.lower().endswith(".h5ad") or is_anndata_zarr(out_file):
        from eigenflow.storage.anndata_export import export_to_anndata

        done = _run(lambda: export_to_anndata(store, out_file, run=run, key=obsm, out=copy_to, overwrite=overwrite))
        out.print(f"wrote {', '.join(done['written'])} of run {done['run']} into {done['path']}")
        return
    from eigenflow.storage.export import export_output

    result = _run(lambda: export_output(store, out_file, run=run, output=output, overwrite=overwrite))
    out.print(f"wrote {result['path']}: {result['output']} of run {result['run']}, shape {tuple(result['shape'])}")


@app.command()
def extend(
    ctx: typer.Context,
    store: str = typer.Argument(..., help="store with a model written by `eigenflow embed`"),
    new: str = typer.Argument(..., help="file or store with the new points"),
    out_store: str = typer.Argument(..., metavar="OUT", help="store to write the new points' embedding to"),
    run: Optional[str] = typer.Option(None, help="model run (default: the latest completed embed run)"),
    chunk_rows: Optional[int] = typer.Option(None, help="rows per chunk of OUT"),
    scheduler: Optional[str] = SCHEDULER_OPT, workers: int = WORKERS_OPT,
    overwrite: bool = typer.Option(False, help="re-ingest NEW over an existing OUT"),
    sharded: Optional[bool] = typer.Option(None, "--sharded/--no-sharded",
                                           help="laplacian_eigenmaps: search the new points in per-shard indexes on "
                                                "the workers (default: as the model was fitted)"),
    run_name: Optional[str] = typer.Option(None, help="id of this extend run (reuse an interrupted run's id to "
                                                      "resume it)"),
    use_rep: Optional[str] = USE_REP_OPT,
) -> None:
    """Embed the points of NEW with the model stored in STORE; write them to OUT."""
    from eigenflow.flows.run import new_run_id

    run_id = _run(lambda: new_run_id("extend", run_name))  # named here: the stop line says how to resume it
    with flow_infrastructure(ctx, scheduler, workers) as infrastructure:
        address = _run(infrastructure.ready)
        from eigenflow.flows.extend import extend as extend_flow

        summary = _run_flow(out_store, run_id, lambda: extend_flow(
            store, new, out_store, run=run, chunk_rows=chunk_rows, scheduler=address, n_workers=workers,
            overwrite=overwrite, sharded=sharded, run_name=run_id, use_rep=use_rep, keep_index=scheduler is not None))
    results = summary["results"]
    out.print(summary_table(summary, {"model": results.get("model_run"), **result_rows(out_store, results)}))


@app.command()
def verify(store: str = typer.Argument(..., help="eigenflow store")) -> None:
    """Check every chunk of STORE against its recorded checksum; list the damaged ones (exit 1 if any)."""
    from eigenflow.storage.checksums import verify as verify_store

    report = _run(lambda: verify_store(store))
    for bad in report["bad"]:
        where = f"{bad['array']}/{bad['chunk']}" if bad["chunk"] else bad["array"]
        out.print(f"[bold red]bad[/] {where}: {bad['problem']}")
    checked = ", ".join(f"{a} ({n} chunks)" for a, n in report["arrays"].items()) or "nothing recorded"
    if report["bad"]:
        err.print(f"[bold red]error:[/] {len(report['bad'])} damaged chunk(s) in {store}; checked {checked}")
        raise typer.Exit(EXIT_FAILURE)
    out.print(f"ok: {store}: every recorded chunk matches; checked {checked}")


@app.command()
def prune(store: str = typer.Argument(..., help="eigenflow store"),
          keep: int = typer.Option(1, help="latest completed fits to keep, with the updates that followed them")) -> None:
    """Remove the results of the runs older than the KEEP latest fits (runs that did not complete stay)."""
    from eigenflow.flows.run import new_run_id
    from eigenflow.storage.lock import store_lock
    from eigenflow.storage.results_table import prune as prune_store
    from eigenflow.storage.store import Store

    opened = _run(lambda: Store.open(store, "r+"))  # an eigenflow store (a lock never claims a new path here)
    with contextlib.ExitStack() as held:
        _run(lambda: held.enter_context(store_lock(opened, new_run_id("prune", None))))  # one writer per store
        removed = _run(lambda: prune_store(opened, keep))
    out.print(f"removed {len(removed)} run(s) of {store}: {', '.join(removed) or 'none'}", soft_wrap=True)


@app.command()
def warm() -> None:
    """Fill the compiled-code cache: load or compile the kNN kernels for every dtype and metric (run once per
    machine, or once per node of a cluster whose nodes do not share EIGENFLOW_CACHE_DIR)."""
    from eigenflow.spectral.neighbours.jit_cache import compile_report, numba_cache_dir
    from eigenflow.spectral.neighbours.index import METRICS
    from eigenflow.tasks.bodies.worker import warm_nndescent

    with compile_report("eigenflow warm") as record:
        seconds = warm_nndescent(("float32", "float64"), METRICS, ("nndescent", "exact"))
    cached = [r for r in record if r["cacheable"]]
    state = (f"{len(cached)} kernels compiled and cached" if cached else "every cacheable kernel loaded from it")
    out.print(f"compiled-code cache {numba_cache_dir()}: {state} ({seconds:.1f} s)", highlight=False, soft_wrap=True)


@app.command()
def info(
    store: str = typer.Argument(..., help="eigenflow store"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """What is in STORE: arrays, shapes, runs with their status and stage timings."""
    from eigenflow.storage.info import info as store_info

    data = _run(lambda: store_info(store))
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    for renderable in info_renderables(data):
        out.print(renderable)


@app.command()
def demo(
    ctx: typer.Context,
    n_points: int = typer.Option(100_000, help="points of the generated manifold"),
    out_dir: str = typer.Option("demo-output", "--out", help="output directory (store, data, plot)"),
    holdout: float = typer.Option(0.1, help="fraction of points held out of the fit"),
    seed: int = typer.Option(0, help="random seed"),
    scheduler: Optional[str] = SCHEDULER_OPT, workers: int = WORKERS_OPT,
    knn_method: str = typer.Option("auto", help="auto (default: exact or NN-descent by the data) | exact | "
                                               "nndescent"),
) -> None:
    """Generate a labeled 32-D Swiss roll, embed it with the flow, report held-out 1-NN accuracy and a plot."""
    with flow_infrastructure(ctx, scheduler, workers) as infrastructure:
        address = _run(infrastructure.ready)
        from eigenflow.flows.demo import run_demo

        result = _run(lambda: with_progress(err, lambda: run_demo(
            n_points, out_dir, holdout=holdout, seed=seed, scheduler=address, n_workers=workers,
            knn_method=knn_method)))
    out.print(summary_table(result, {
        "points": result["results"].get("n"),
        "held out": result["n_heldout"],
        "1-NN accuracy (held out)": f"{result['accuracy']:.4f}",
        "store": f"{out_dir}/demo.zarr",
        "plot": result["plot"],
    }))


if __name__ == "__main__":  # pragma: no cover
    main()
