"""The command line: ``qg train | test | predict | tune | generate | plot | profile`` (``python -m
QuantumGravPy``).

A mistake in what the user passed (config, override, path, checkpoint) prints one line starting
with ``error:`` and exits with status 2; ``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from collections import Counter
from collections.abc import Sequence

from .errors import COMMAND_LINE_ENV, QGError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qg", description="Train graph neural networks on causal sets and other graphs."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("config", metavar="CONFIG", help="YAML config file")
        p.add_argument(
            "overrides",
            nargs="*",
            metavar="KEY=VALUE",
            help="override config keys, e.g. training.num_epochs=5 (values are YAML)",
        )
        p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
        return p

    train = command("train", "train a model and test its best checkpoint")
    train.add_argument(
        "--overwrite", action="store_true", help="replace a run already in training.path"
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in training.path from checkpoints/last.pt (start it if it has "
        "not saved one yet); automatic when torchrun or SLURM restarts the job",
    )
    train.add_argument(
        "--force",
        action="store_true",
        help="with --resume: continue even though the config differs from the checkpoint's",
    )
    test = command("test", "evaluate a checkpoint on the test split; prints JSON")
    test.add_argument("--checkpoint", required=True, metavar="PATH", help="checkpoint file")
    pred = sub.add_parser(
        "predict",
        help="predict with a trained run on new files or its own data; one row per graph",
        description="Predict with the model of RUN_DIR (its config.yaml and checkpoints/best.pt) "
        "on new Zarr/HDF5 files, or on the run's data source as KEY=VALUE overrides change it "
        "(e.g. data.seed=7 data.num_graphs=500). Writes one row per graph in input order, with "
        "its source, to RUN_DIR/predictions.npz or --output; labels, where the data has them, "
        "give metrics too.",
    )
    pred.add_argument("run_dir", metavar="RUN_DIR", help="a training run's directory")
    pred.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override keys of the run's config, e.g. data.root=/scratch/cache",
    )
    pred.add_argument(
        "--checkpoint", metavar="PATH", help="weights to use (default RUN_DIR/checkpoints/best.pt)"
    )
    pred.add_argument(
        "--files",
        nargs="+",
        metavar="PATH",
        help="Zarr stores or HDF5 files (paths or glob patterns) to predict on, read as the "
        "run's data.* options say; default: the run's data source",
    )
    pred.add_argument(
        "--output",
        metavar="FILE",
        help="a .npz (every task) or .csv (graph rows; node rows in <stem>_nodes.csv) file "
        "(default RUN_DIR/predictions.npz)",
    )
    pred.add_argument("--overwrite", action="store_true", help="replace an output file that exists")
    pred.add_argument(
        "--world-size",
        type=int,
        default=1,
        metavar="W",
        help="share the work over W processes (the same output for any W)",
    )
    pred.add_argument(
        "--split",
        choices=("all", "train", "val", "test"),
        default="all",
        help="one split of the inputs, drawn as training draws it (default all)",
    )
    pred.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    prof = command(
        "profile",
        "profile a few training steps on every rank: a trace per rank and where the time went",
    )
    prof.add_argument(
        "--steps",
        type=int,
        default=20,
        metavar="N",
        help="training steps to profile, after 3 warm-up steps (default 20)",
    )
    prof.add_argument(
        "--world-size", type=int, metavar="W", help="processes (default parallel.world_size)"
    )
    prof.add_argument(
        "--output",
        metavar="DIR",
        help="an empty or new folder for rank<r>.trace.json and summary.csv (default "
        "training.path/profile, in a run directory that holds no run)",
    )
    tune = sub.add_parser(
        "tune",
        help="search hyperparameters with Optuna: trials of a search space, best.yaml",
        description="Run a study of N trials around CONFIG, varying the keys of SPACE. The "
        "study lives in training.path: one run per trial (trial_NNNN/), trials.csv, best.yaml, "
        "plots, and (by default) the study file study.journal.",
    )
    tune.add_argument("config", metavar="CONFIG", help="YAML config file: the base of every trial")
    tune.add_argument("space", metavar="SPACE", help="YAML search space file")
    tune.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override config keys of the base, e.g. training.path=studies/lr",
    )
    tune.add_argument(
        "--trials", type=int, required=True, metavar="N", help="trials in the study, in all"
    )
    tune.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="K",
        help="run K trials at once on this machine (the cores are shared between them)",
    )
    tune.add_argument(
        "--storage",
        metavar="URL",
        help="where the study lives: a journal file path (default training.path/study.journal) "
        "or a database URL such as postgresql://user@host/db, for many jobs at once",
    )
    tune.add_argument(
        "--study", metavar="NAME", help="the study's name (default: the config's name)"
    )
    tune.add_argument(
        "--resume",
        action="store_true",
        help="continue the study: finished trials are kept, trials a killed job left running "
        "are run again, until it has N trials",
    )
    tune.add_argument(
        "--stale-after",
        type=float,
        metavar="S",
        help="a trial another machine runs is taken as abandoned after S seconds without a "
        "heartbeat (default 300; each job sends one every S/10 seconds)",
    )
    tune.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    plot = sub.add_parser(
        "plot",
        help="draw the curves of one run, or of several runs in one picture",
        description="Draw loss, accuracy and learning rate per epoch. One run: curves.png (and "
        "the test confusion matrix) in its directory. Several: their curves overlaid.",
    )
    plot.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    plot.add_argument(
        "--output",
        metavar="PNG",
        help="where to write the picture (default: RUN_DIR/curves.png for one run, "
        "comparison.png for several)",
    )
    plot.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    generate = command("generate", "build the dataset cache without training")
    generate.add_argument(
        "--world-size",
        type=int,
        default=1,
        metavar="W",
        help="generate with W processes, each its own range of graphs (the same result)",
    )
    generate.add_argument(
        "--output",
        metavar="PATH",
        help="instead of the cache, write the embedded causal sets to this Zarr store or HDF5 "
        "file, one group per causal set (cset_1, ...), in Julia's orientation",
    )
    generate.add_argument(
        "--format",
        choices=("zarr", "hdf5"),
        help="of --output (default: from its extension, .zarr or .h5/.hdf5)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after options (``test CFG --checkpoint P key=value``), which argparse
    # alone does not accept for a variable-length positional; collect them here.
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or args.command == "plot"]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    args.overrides = [*getattr(args, "overrides", []), *extra]
    outer = os.environ.get(COMMAND_LINE_ENV)
    os.environ[COMMAND_LINE_ENV] = "1"  # errors say --overwrite, not overwrite=True
    try:
        return COMMANDS[args.command](args)
    except QGError as e:
        if args.debug:
            traceback.print_exc()
        worker_traceback = getattr(e, "traceback", None)
        if worker_traceback:  # a rank crashed on something other than bad input: show where
            print(worker_traceback.rstrip(), file=sys.stderr)
        print(f"error: {_rank_prefix()}{e}", file=sys.stderr)
        return EXIT_USER_ERROR if not worker_traceback else 1
    except OSError as e:
        if e.filename is None:  # not about a path the user gave: a bug, keep the traceback
            raise
        if args.debug:
            traceback.print_exc()
        print(f"error: {e.filename}: {e.strerror}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:  # main() called from Python (a notebook, the tests) leaves no trace
        if outer is None:
            os.environ.pop(COMMAND_LINE_ENV, None)
        else:
            os.environ[COMMAND_LINE_ENV] = outer


def run() -> None:
    """The ``qg`` program (and ``python -m QuantumGravPy``): :func:`main`, then a quick exit:
    freezing the objects spares the interpreter's final garbage collections a walk over all
    torch created (``parallel/forkserver_preload.py``), a second or more per process."""
    code = main()
    gc.freeze()
    sys.exit(code)


def _rank_prefix() -> str:
    distributed = sys.modules.get(f"{__package__}.parallel.distributed")
    if distributed is None:  # never loaded, so no process group: a mistake told before torch
        return ""
    return f"[RANK {distributed.get_rank()}] " if distributed.is_initialized() else ""


def _train(args: argparse.Namespace) -> int:
    from .config import load_config
    from .errors import ConfigError

    # The config and the flags first: a mistake is told before torch is loaded.
    config = load_config(args.config, args.overrides)
    overwrite, resume, force = args.overwrite, args.resume, args.force
    if force and not resume:
        raise ConfigError("--force only applies to --resume")
    from .parallel.distributed import process_env, restart_count
    from .runs import check_resumable
    from .runs.directory import check_flags, check_run_dir

    check_flags(overwrite=overwrite, resume=resume)
    if restart_count() > 0:
        overwrite, resume = False, True  # the launcher restarted the job: continue, never wipe
    env = process_env()
    if env is not None or config.parallel.world_size > 1:
        # Spawn the ranks (launch checks the run directory first), or, under torchrun or
        # srun, be one of theirs.
        from .training import launch

        result = launch(config, overwrite=overwrite, resume=resume, force=force)
        if env is None or env.rank == 0:
            _report(result["test"], config)
        return 0
    # Refuse an occupied run directory (or a checkpoint that does not fit) before the model
    # libraries load and minutes go on data and model.
    if resume:
        check_resumable(config, world_size=1, force=force)
    else:
        check_run_dir(config.run_dir, overwrite=overwrite)
    from .training import Trainer

    trainer = Trainer(config, overwrite=overwrite, resume=resume, force=force)
    try:
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        metrics = trainer.run_test(test_loader)
    finally:
        trainer.close()
    _report(metrics, config)
    return 0


def _report(metrics: dict[str, float], config) -> None:
    from .config import headline_columns

    columns = (*headline_columns(config, "test"), "test_loss")
    scores = "  ".join(f"{c} {metrics[c]:.4f}" for c in columns)
    print(f"{scores}  run saved in {config.run_dir}")


def _test(args: argparse.Namespace) -> int:
    from .config import load_config

    config = load_config(args.config, args.overrides)
    from .runs import load_checkpoint
    from .training import Trainer

    load_checkpoint(args.checkpoint)  # a bad file fails before the data is built
    trainer = Trainer(config)
    _, _, test_loader = trainer.prepare_dataloaders()
    metrics = trainer.run_test(test_loader, checkpoint=args.checkpoint)
    print(json.dumps(metrics))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from .config import load_config
    from .errors import ConfigError
    from .logs import configure_logging

    config = load_config(args.config, args.overrides)
    from .data import dataset_from_config

    configure_logging(config.log_level)
    if args.world_size < 1:
        raise ConfigError(f"--world-size: expected a positive number, found {args.world_size}")
    if args.output is not None:
        from .data.writing import write_embedded

        path = write_embedded(config.data, args.output, file_format=args.format)
        print(f"{config.data.num_graphs} causal sets written to {path}")
        return 0
    if args.format is not None:
        raise ConfigError("--format: only with --output")
    dataset = dataset_from_config(config.data, world_size=args.world_size)
    print(f"{len(dataset)} graphs ready under {config.data.root}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from .tune import STALE_AFTER_S, tune
    from .tune.outputs import BEST_YAML, TRIALS_CSV, shown

    study = tune(
        args.config,
        args.space,
        trials=args.trials,
        parallel=args.parallel,
        storage=args.storage,
        study=args.study,
        resume=args.resume,
        stale_after_s=STALE_AFTER_S if args.stale_after is None else args.stale_after,
        overrides=args.overrides,
    )
    states = Counter(t.state.name.lower() for t in filter(shown, study.get_trials(deepcopy=False)))
    folder = study.user_attrs.get("directory") or ""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    print(f"study {study.study_name}: {counts}; {TRIALS_CSV} and {BEST_YAML} in {folder}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    import re
    from pathlib import Path

    from .parallel import distributed
    from .predict import predict
    from .predict.run import DEFAULT_OUTPUT

    # ``--files a.h5 b.h5 data.seed=1``: what looks like an override is one
    files, overrides = [], list(args.overrides)
    for item in args.files or ():
        is_override = re.match(r"[A-Za-z_][\w.]*=", item) and not Path(item).exists()
        (overrides if is_override else files).append(item)
    result = predict(
        args.run_dir,
        files or None,
        checkpoint=args.checkpoint,
        overrides=overrides,
        output=args.output or Path(args.run_dir) / DEFAULT_OUTPUT,
        overwrite=args.overwrite,
        world_size=args.world_size,
        split=args.split,
    )
    if distributed.process_env() is not None and distributed.process_env().rank != 0:
        return 0
    if result.metrics:
        numbers = {k: v for k, v in result.metrics.items() if isinstance(v, float)}
        print("  ".join(f"{k} {v:.4f}" for k, v in numbers.items()))
    written = f" and {len(result.nodes['graph'])} node rows" if result.nodes else ""
    print(f"{len(result)} graphs{written} predicted; written to {result.output}")
    return 0


def _profile(args: argparse.Namespace) -> int:
    from .config import load_config

    config = load_config(args.config, args.overrides)
    from .training.profile import SUMMARY, profile, summary_table

    target, rows = profile(config, steps=args.steps, world_size=args.world_size, output=args.output)
    print(summary_table(rows))
    print(f"traces (rank<r>.trace.json) and {SUMMARY} in {target}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from .runs import plots

    for path in args.runs:  # every directory checked first
        plots.read_run(path)
    if len(args.runs) == 1 and args.output is None:
        written = plots.write_run_plots(args.runs[0])
    else:
        written = [plots.compare_runs(args.runs, args.output or "comparison.png")]
    for path in written:
        print(path)
    return 0


COMMANDS = {
    "train": _train,
    "test": _test,
    "predict": _predict,
    "tune": _tune,
    "generate": _generate,
    "plot": _plot,
    "profile": _profile,
}
