"""The command line: ``qg train | test | predict | sample | tune | generate | plot | profile``
(``python -m QuantumGravPy``).

A mistake in what the user passed (config, override, path, checkpoint) prints one line starting
with ``error:`` and exits with status 2. What is not (an exception in the user's own code, memory
running out: a :class:`~QuantumGravPy.errors.RunError`) prints one line too, saying what and
where, and exits with status 1. ``--debug`` shows the traceback as well, the original one
included.
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import sys
import traceback
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import COMMAND_LINE_ENV, QGError, RunError, disk_full
from ..logs import configure_logging
from .parser import build_parser

if TYPE_CHECKING:  # imported when a command runs, so that `qg --help` starts at once
    from ..config import Config

EXIT_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after options (``test CFG --checkpoint P key=value``), which argparse
    # alone does not accept for a variable-length positional; collect them here.
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or args.command == "plot"]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    args.overrides = [*getattr(args, "overrides", []), *extra]
    configure_logging("WARNING")  # what loading the config notes (a run sets its own level)
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
        # a rank that failed or went silent elsewhere: the user's mistake only if it was one
        users = getattr(e, "users", True)
        return EXIT_USER_ERROR if users and not worker_traceback else EXIT_FAILED
    except RunError as e:
        if args.debug:
            traceback.print_exc()
            if e.traceback:  # a rank's, from its own process
                print(e.traceback.rstrip(), file=sys.stderr)
        print(f"error: {_rank_prefix()}{e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        if disk_full(e):  # a write that none of ours caught: which file, and what to do
            if args.debug:
                traceback.print_exc()
            where = f" writing {e.filename}" if e.filename else ""
            print(
                f"error: no space left on the device{where}: free space and run again"
                f"{_continuing(args, argv)}",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if e.filename is None:  # not about a path the user gave: a bug, keep the traceback
            raise
        if args.debug:
            traceback.print_exc()
        print(f"error: {e.filename}: {e.strerror}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"interrupted{_continuing(args, argv)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:  # main() called from Python (a notebook, the tests) leaves no trace
        if outer is None:
            os.environ.pop(COMMAND_LINE_ENV, None)
        else:
            os.environ[COMMAND_LINE_ENV] = outer


def _continuing(args: argparse.Namespace, argv: Sequence[str] | None) -> str:
    """For an interrupted training or study: the one command that continues it."""
    if args.command not in ("train", "tune"):
        return ""
    given = list(sys.argv[1:] if argv is None else argv)
    again = [a for a in given if a != "--overwrite"]  # it would start the run anew
    if "--resume" not in again:
        again.append("--resume")
    return f"; to continue: qg {shlex.join(again)}"


def run() -> None:
    """The ``qg`` program (and ``python -m QuantumGravPy``): :func:`main`, then a quick exit:
    freezing the objects spares the interpreter's final garbage collections a walk over all
    torch created (``QuantumGravPy/forkserver.py``), a second or more per process."""
    code = main()
    gc.freeze()
    sys.exit(code)


def _rank_prefix() -> str:
    distributed = sys.modules.get(f"{__package__}.parallel.distributed")
    if distributed is None:  # never loaded, so no process group: a mistake told before torch
        return ""
    return f"[RANK {distributed.get_rank()}] " if distributed.is_initialized() else ""


def _train(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import ConfigError

    # The config and the flags first: a mistake is told before torch is loaded.
    config = load_config(args.config, args.overrides)
    overwrite, resume, force = args.overwrite, args.resume, args.force
    if force and not resume:
        raise ConfigError("--force only applies to --resume")
    from ..parallel.distributed import process_env, restart_count
    from ..runs.layout import check_flags

    check_flags(overwrite=overwrite, resume=resume)
    configure_logging(config.log_level)  # what is done before the trainers start (the cache)
    if restart_count() > 0:
        overwrite, resume = False, True  # the launcher restarted the job: continue, never wipe
    env = process_env()
    run = {"overwrite": overwrite, "resume": resume, "force": force}
    if env is not None or config.parallel.world_size > 1:
        # Spawn the ranks (launch checks the run directory first), or, under torchrun or
        # srun, be one of theirs.
        from ..training import launch

        if env is not None:  # a rank of torchrun's or srun's: as a spawned rank (parallel/spawn)
            gc.freeze()
        result = launch(config, **run)
        if env is None or env.rank == 0:
            _report(result["test"], config)
        return 0
    from ..training import fit
    from ..training.launching.launch import preflight

    # An occupied run directory (or a checkpoint that does not fit) is refused before minutes
    # go on data and model, as for a distributed job.
    preflight(config, **run)
    _report(fit(config, **run)["test"], config)
    return 0


def _report(metrics: dict[str, float], config: Config) -> None:
    from ..config import headline_columns

    columns = (*headline_columns(config, "test"), "test_loss")
    scores = "  ".join(f"{c} {metrics[c]:.4f}" for c in columns)
    print(f"{scores}  run saved in {config.run_dir}")


def _test(args: argparse.Namespace) -> int:
    from ..config import load_config

    config = load_config(args.config, args.overrides)
    from ..runs import load_checkpoint
    from ..runs.layout import json_text
    from ..training import Trainer

    load_checkpoint(args.checkpoint)  # a bad file fails before the data is built
    trainer = Trainer(config)
    _, _, test_loader = trainer.prepare_dataloaders()
    metrics = trainer.run_test(test_loader, checkpoint=args.checkpoint)
    print(json_text(metrics))  # NaN as null: JSON has no NaN
    return 0


def _generate(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import ConfigError
    from ..logs import configure_logging

    config = load_config(args.config, args.overrides)
    from ..data import dataset_from_config

    configure_logging(config.log_level)
    if args.world_size < 1:
        raise ConfigError(f"--world-size: expected a positive number, found {args.world_size}")
    if args.output is not None:
        from ..data.sources.writing import write_embedded

        path = write_embedded(config.data, args.output, file_format=args.format)
        print(f"{config.data.num_graphs} causal sets written to {path}")
        return 0
    if args.format is not None:
        raise ConfigError("--format: only with --output")
    dataset = dataset_from_config(config.data, world_size=args.world_size)
    print(f"{len(dataset)} graphs ready under {config.data.root}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from ..tune import STALE_AFTER_S, tune
    from ..tune.results import BEST_YAML, TRIALS_CSV, shown

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


def _sample(args: argparse.Namespace) -> int:
    from ..parallel import distributed
    from ..predict.sampling import sample

    report = sample(
        args.run_dir,
        num=args.num,
        output=args.output,
        seed=args.seed,
        world_size=args.world_size,
        checkpoint=args.checkpoint,
        overrides=args.overrides,
        overwrite=args.overwrite,
        condition=args.condition,
    )
    if distributed.process_env() is not None and distributed.process_env().rank != 0:
        return 0
    print(report.table())
    print(f"{args.num} causal sets written to {report.output}; the report beside it")
    return 0


def _predict(args: argparse.Namespace) -> int:
    import re
    from pathlib import Path

    from ..parallel import distributed
    from ..predict import predict
    from ..predict.run import DEFAULT_OUTPUT

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
        seed=args.seed,
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
    from ..config import load_config

    config = load_config(args.config, args.overrides)
    from ..training.launching.profile import SUMMARY, profile, summary_table

    target, rows = profile(config, steps=args.steps, world_size=args.world_size, output=args.output)
    print(summary_table(rows))
    print(f"traces (rank<r>.trace.json.gz) and {SUMMARY} in {target}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from ..runs import plots

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
    "sample": _sample,
    "tune": _tune,
    "generate": _generate,
    "plot": _plot,
    "profile": _profile,
}
