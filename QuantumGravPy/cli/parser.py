"""The ``qg`` program's commands, their arguments and options, and the help that says what
each does (``qg --help``, ``qg COMMAND --help``); :mod:`QuantumGravPy.cli` runs them."""

from __future__ import annotations

import argparse


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
    pred.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed the random numbers a model draws in evaluation (a VAE sampling its latent): "
        "the same predictions for the same N on any number of processes",
    )
    pred.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    samp = sub.add_parser(
        "sample",
        help="draw causal sets from a trained generative model into a Zarr or HDF5 file",
        description="Draw N causal sets from the generative model of RUN_DIR (its config.yaml "
        "and checkpoints/best.pt; a model with generate(num, generator=...)) and write them "
        "as QuantumGrav.jl writes causal sets, with where they came from, to train and predict "
        "on like any file. Report them by size bin against the training data of the same sizes "
        "(or sprinklings, beyond them) and exact values: valid orders, ordering fraction, "
        "Myrheim-Meyer dimension, links and intervals per element, height, width, and a "
        "Kolmogorov-Smirnov test; as a table, <stem>_report.csv and <stem>_report.png.",
    )
    samp.add_argument("run_dir", metavar="RUN_DIR", help="a training run's directory")
    samp.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="override keys of the run's config"
    )
    samp.add_argument("--num", type=int, required=True, metavar="N", help="causal sets to draw")
    samp.add_argument(
        "--output", required=True, metavar="PATH", help="a .zarr store or .h5 file to write"
    )
    samp.add_argument(
        "--seed", type=int, default=0, help="the draw's seed: the same samples for any W"
    )
    samp.add_argument(
        "--world-size", type=int, default=1, metavar="W", help="share the work over W processes"
    )
    samp.add_argument(
        "--checkpoint", metavar="PATH", help="weights to use (default RUN_DIR/checkpoints/best.pt)"
    )
    samp.add_argument(
        "--condition",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="what to grow, for a model conditioned on it (repeatable): dimension=3",
    )
    samp.add_argument("--overwrite", action="store_true", help="replace an output that exists")
    samp.add_argument("--debug", action="store_true", help="show tracebacks of errors")
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
        help="an empty or new folder for rank<r>.trace.json.gz and summary.csv (default "
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
        metavar="FORMAT",
        help="of --output: zarr or hdf5 (default: from its extension, .zarr or .h5/.hdf5)",
    )
    return parser
