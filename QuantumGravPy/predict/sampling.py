"""``qg sample``: causal sets drawn from a trained generative model, written as files the
library reads, and compared with the data it was trained on.

The model is the run's (its ``config.yaml`` and best checkpoint); it must have a method
``generate(num, generator=...)`` returning :class:`~QuantumGravPy.physics.CausalSet` objects.
The samples are drawn in chunks of :data:`CHUNK`, chunk c from a generator seeded by
(``seed``, c) alone; with W processes rank r draws chunks r, r + W, ..., each on one CPU thread,
so the samples are the same for any number of processes. Rank 0 writes them in the layout
QuantumGrav.jl writes (a group per causal set, its causal and link matrices; see
:mod:`QuantumGravPy.data.sources.writing`), so they train and predict like any file, and
reports them against the run's training split (:mod:`.sample_report`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch_geometric.data import Data

from .. import logs
from ..config import Config, ModelConfig, load_config
from ..data.sources.formats import format_of
from ..data.sources.writing import write_causal_sets, writer_for
from ..errors import ConfigError, DiskFullError, RunDirectoryError, disk_full, flag
from ..parallel import distributed, run_distributed
from ..physics import CausalSet
from ..runs.reproducibility import installed
from .model import model_from_checkpoint, run_files
from .replacing import Replacement
from .sample_report import Report, build, report_paths, write_report
from .sample_report import compare as compare_samples

CHUNK = 64  # samples drawn from one generator
PROVENANCE = "provenance"  # the samples file's root attribute: where they came from, as JSON


@dataclasses.dataclass(frozen=True)
class _Job:
    config: Config
    checkpoint: Path
    num: int
    seed: int
    condition: dict[str, Any] = dataclasses.field(default_factory=dict)


def parse_condition(pairs: Sequence[str] | dict[str, Any] | None) -> dict[str, Any]:
    """``--condition KEY=VALUE`` pairs as keyword arguments of ``generate`` (each value read
    as YAML: ``dimension=3`` is the number 3)."""
    if pairs is None or isinstance(pairs, dict):
        return dict(pairs or {})
    condition = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--condition: expected KEY=VALUE, found {pair!r}")
        condition[key] = yaml.safe_load(value)
    return condition


def check_condition(model: Any, condition: dict[str, Any], model_type: str) -> None:
    """A condition the model's ``generate`` does not take, refused naming it."""
    taken = inspect.signature(model.generate).parameters
    for key in condition:
        if key not in taken or key in ("num", "generator"):
            raise ConfigError(
                f"--condition: {model_type}.generate takes no {key!r}; a model conditioned "
                "on it has a keyword argument of that name"
            )


def chunk_generator(seed: int, chunk: int) -> torch.Generator:
    """The generator of chunk ``chunk`` of a draw seeded ``seed``: the same for any number of
    processes, and unrelated between chunks (numpy's SeedSequence spreads the pair)."""
    state = np.random.SeedSequence([seed, chunk]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def grown(model: Any, num: int, generator: torch.Generator, condition: dict[str, Any]) -> Any:
    """``model.generate(num, ...)`` under ``condition``; a ``ValueError`` it raises for the
    condition is refused naming ``--condition``."""
    try:
        return model.generate(num, generator=generator, **condition)
    except ValueError as e:
        if not condition:
            raise
        raise ConfigError(f"--condition: {e}") from e


def _check_grows(model: Any, condition: dict[str, Any], generator: torch.Generator) -> None:
    """``generate(0, ...)`` under ``condition``: its ``ValueError`` is the refusal of a value
    it cannot grow. Anything else it raises for no sets at all is left to the real draw."""
    try:
        grown(model, 0, generator, condition)
    except ConfigError:
        raise
    except Exception:  # a generate written for num >= 1 only: it draws as before
        return


def sample_worker(rank: int, world_size: int, job: _Job) -> list[CausalSet] | None:
    """Draw this rank's chunks; rank 0 returns every sample, in order."""
    if world_size > 1:
        level = job.config.log_level if rank == 0 else "WARNING"
        logs.configure_logging(level, prefix=f"[RANK {rank}] ")
    loaded = model_from_checkpoint(job.config, job.checkpoint, "cpu")
    model = loaded.model
    chunks = range(0, job.num, CHUNK)
    mine = list(range(len(chunks)))[rank::world_size]
    drawn: dict[int, list[CausalSet]] = {}
    bar = logs.progress(mine, desc="sampling", unit="chunk", enabled=rank == 0)
    with distributed.one_thread(torch.device("cpu")):  # the same bits for any number
        for c in bar:
            count = min(CHUNK, job.num - chunks[c])
            sets = grown(model, count, chunk_generator(job.seed, c), job.condition)
            drawn[c] = [_checked(s, job.config.model) for s in sets]
            if len(drawn[c]) != count:
                raise ConfigError(
                    f"model.type: {job.config.model.type}.generate({count}) returned "
                    f"{len(drawn[c])} causal sets"
                )
    parts = distributed.all_gather_object(drawn) if world_size > 1 else [drawn]
    if rank != 0:
        return None
    joined = {c: sets for part in parts for c, sets in part.items()}
    return [s for c in sorted(joined) for s in joined[c]]


def _checked(drawn: Any, model: ModelConfig) -> CausalSet:
    if not isinstance(drawn, CausalSet):
        raise ConfigError(
            f"model.type: {model.type}.generate returned {type(drawn).__name__}, "
            "expected QuantumGravPy.physics.CausalSet objects"
        )
    return drawn


def sample(
    run_dir: str | Path,
    *,
    num: int,
    output: str | Path,
    seed: int = 0,
    world_size: int = 1,
    checkpoint: str | Path | None = None,
    overrides: Sequence[str] = (),
    overwrite: bool = False,
    compare: int = 2000,
    condition: Sequence[str] | dict[str, Any] | None = None,
) -> Report:
    """Draw ``num`` causal sets from the generative model of ``run_dir`` and write them to
    ``output`` (a ``.zarr`` store or ``.h5`` file), with ``seed`` (the same samples for any
    ``world_size``). Returns the report against up to ``compare`` causal sets of the run's
    training split, also written beside ``output`` as ``<stem>_report.csv`` and
    ``<stem>_report.png``. ``condition``: what to grow, for a conditioned model (keyword
    arguments of its ``generate``, or ``KEY=VALUE`` strings: ``{"dimension": 3}``)."""
    condition = parse_condition(condition)
    if num < 1:
        raise ConfigError(f"--num: expected a positive number of samples, found {num}")
    if seed < 0:
        raise ConfigError(f"--seed: expected a number >= 0, found {seed}")
    if world_size < 1:
        raise ConfigError(f"--world-size: expected a positive number, found {world_size}")
    output = Path(output)
    file_format = writer_for(output)
    if not output.parent.is_dir():
        raise RunDirectoryError(f"--output: folder {output.parent} does not exist")
    env = distributed.process_env()
    writes = env is None or env.rank == 0  # under torchrun or srun, only rank 0 writes
    replacement = Replacement([output, *report_paths(output)])
    if writes:
        replacement.recover()
    for path in replacement.paths:
        if path.exists() and not overwrite:
            raise RunDirectoryError(
                f"{path} exists; pass {flag('overwrite')} to replace it or choose another --output"
            )
    replacement.check()  # on every rank: a folder that cannot be written, before sampling
    if writes:
        replacement.begin()
    try:
        config_path, checkpoint = run_files(run_dir, checkpoint)
        # sampling computes on CPUs, each process on one thread: never a GPU per process
        overrides = [*overrides, "training.device=cpu", "parallel.backend=gloo"]
        config = load_config(config_path, overrides)
        logs.configure_logging(config.log_level)
        model = model_from_checkpoint(config, checkpoint, "cpu").model
        if not callable(getattr(model, "generate", None)):
            raise ConfigError(
                f"model.type: {config.model.type or 'GNNModel'} has no generate(num, "
                "generator=...) method; qg sample draws causal sets from a generative model"
            )
        check_condition(model, condition, config.model.type or "GNNModel")
        if condition:  # a value it cannot grow: refused once, before any process starts
            _check_grows(model, condition, chunk_generator(seed, 0))
        job = _Job(config, checkpoint, num, seed, condition)
        if world_size == 1 and env is None:
            samples = sample_worker(0, 1, job)
        else:
            samples = run_distributed(sample_worker, config, job, world_size=world_size)
        if samples is None:  # a rank other than 0 under torchrun or srun
            return build({"elements": np.empty(0)}, {}, output, dimension=None)
        report = compare_samples(samples, config.data, output, limit=compare, condition=condition)
        origin = _provenance(run_dir, checkpoint, job, samples, getattr(model, "sizes", None))
        _write(samples, report, replacement, file_format, origin)
        return report
    finally:
        replacement.abandon()  # unless committed: the old output stays as it was


def _provenance(
    run_dir: str | Path, checkpoint: Path, job: _Job, samples: list[CausalSet], asked: Any
) -> dict[str, Any]:
    """Where the samples came from: the run, its checkpoint and the checkpoint's SHA-256, the
    seed, the sizes the model was asked to grow and those it grew, and the package's version."""
    digest = hashlib.sha256()
    with open(checkpoint, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    sizes = [int(s.relations.shape[-1]) for s in samples]
    return {
        "run": str(Path(run_dir).resolve()),
        "checkpoint": str(Path(checkpoint).resolve()),
        "checkpoint_sha256": digest.hexdigest(),
        "seed": job.seed,
        "num": job.num,
        "model": job.config.model.type or "GNNModel",
        "condition": job.condition,
        "sizes_asked": None if asked is None else [int(x) for x in asked],
        "sizes": [min(sizes), max(sizes)],
        "version": installed("QuantumGravPy"),
    }


def provenance(path: str | Path) -> dict[str, Any] | None:
    """Where the samples in the file ``path`` came from, as ``qg sample`` wrote it (None for a
    file it did not write)."""
    path = Path(path)
    fmt = format_of(path)
    with fmt.open(path) as store:
        text = fmt.description(store, PROVENANCE)
    return None if text is None else json.loads(text)


def _write(
    samples: list[CausalSet],
    report: Report,
    replacement: Replacement,
    file_format: str,
    origin: dict[str, Any],
) -> None:
    """The report's files and the samples', written whole in the replacement's hidden folder,
    then moved in (:mod:`.replacing`)."""
    output, folder = replacement.paths[0], replacement.partial
    try:
        write_report(report, folder)
        write_causal_sets(
            folder / output.name,
            ((Data(), s.relations.bool(), s.links.bool()) for s in samples),
            file_format=file_format,
            total=len(samples),
            attributes={PROVENANCE: json.dumps(origin)},
        )
    except OSError as e:
        if disk_full(e):
            raise _disk_full(output) from e
        raise
    replacement.commit()


def _disk_full(output: Path) -> DiskFullError:
    kept = "nothing was replaced" if output.exists() else "nothing was written"
    return DiskFullError(
        f"no space left on the device writing the samples to {output}: free space and run "
        f"again; {kept}"
    )
