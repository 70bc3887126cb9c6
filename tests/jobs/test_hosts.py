"""Jobs on two hosts (network namespaces, tests/jobs/hosts.py), started as users start them: one
torchrun command on each host (static or c10d rendezvous), or the one command srun starts on
each node of a two-node job, with SLURM's variables; they meet over the hosts' own addresses. What is checked: such a
job learns what one host's two processes learn; a rank that fails on one host ends the other
with its rank, host and error; a host the others could not reach is refused at once."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import run_forked, save_graphs, small_raw_config

from QuantumGravPy.config import load_config
from QuantumGravPy.data import dataset_from_config

from .hosts import ADDRESSES, INTERFACE, two_hosts

# Each test makes hosts of its own (namespaces and veth names of their own): they run in parallel.
pytestmark = pytest.mark.timeout(240)

PORT = 29512
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def write_config(tmp_path: Path, data_root: Path, **sections) -> Path:
    raw = small_raw_config(tmp_path, data_root)
    raw["parallel"] = {"timeout_s": 30}
    if "type" in sections.get("model", {}):  # your own model: no built-in model's keys
        raw["model"] = {}
    for key, value in sections.items():
        raw.setdefault(key, {}).update(value)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    dataset_from_config(load_config(path).data, progress=False)  # the cache, built once
    return path


def torchrun(host, node_rank: int, config: Path, *overrides: str) -> list[str]:
    return [
        TORCHRUN, "--nnodes=2", "--nproc_per_node=1", f"--node_rank={node_rank}",
        f"--master_addr={ADDRESSES[0]}", f"--master_port={PORT}",
        "-m", "QuantumGravPy", "train", str(config), *overrides,
    ]  # fmt: skip


# What a test's own process may hold (from jobs it ran in-process) that a job must not inherit.
_LAUNCHER = ("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_", "GROUP_", "SLURM_", "TORCHELASTIC_",
             "GLOO_", "NCCL_", "PYTHONPATH", "QG_")  # fmt: skip


def clean_env(**extra: str) -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER)} | extra


def srun_task(task: int) -> dict:
    """The variables srun gives task ``task`` of a job of one task on each of two nodes; the
    master is the first node of the list, its port from the job id (24242 here)."""
    return {
        "SLURM_PROCID": str(task), "SLURM_NODEID": str(task), "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "node[0-1]",
        "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_ID": "4242",
    }  # fmt: skip


def start_on_both(hosts, tmp_path: Path, config: Path, *overrides: str, launcher: str):
    """The job's two commands, one on each host, as ``launcher`` (torchrun or srun) starts
    them; their output in host0.log and host1.log."""
    procs = []
    for i, host in enumerate(hosts):
        if launcher == "torchrun":
            argv, env = torchrun(host, i, config, *overrides), clean_env()
        else:
            argv = [sys.executable, "-m", "QuantumGravPy", "train", str(config), *overrides]
            env = clean_env(**srun_task(i))
        procs.append(host.popen(argv, env=env, cwd=tmp_path, log=tmp_path / f"host{i}.log"))
    return procs


def run_on_both(
    hosts, tmp_path: Path, config: Path, *overrides: str, wait_s: float, launcher: str = "srun"
):
    """The job on both hosts (:func:`start_on_both`); (exit status, output, seconds) of each,
    in host order. Both must end within ``wait_s``."""
    start = time.monotonic()
    procs = start_on_both(hosts, tmp_path, config, *overrides, launcher=launcher)
    results = []
    for i, proc in enumerate(procs):
        try:
            code = proc.wait(timeout=max(1.0, wait_s - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise AssertionError(
                f"host {i} still runs after {wait_s} s:\n" + (tmp_path / f"host{i}.log").read_text()
            ) from None
        results.append((code, (tmp_path / f"host{i}.log").read_text(), time.monotonic() - start))
    return results


def test_a_job_on_two_hosts_learns_what_two_processes_on_one_learn(tmp_path, data_root):
    """Both hosts named alike ("node"), each with its own /dev/shm: gradients must cross the
    network, not a shared buffer that each host maps from its own memory."""
    config = write_config(tmp_path, data_root)
    with two_hosts(("node", "node")) as hosts:
        results = run_on_both(
            hosts, tmp_path, config, f"training.path={tmp_path / 'two_hosts'}",
            f"parallel.interface={INTERFACE}", "log_level=INFO", wait_s=200, launcher="torchrun",
        )  # fmt: skip
    for code, output, _ in results:
        assert code == 0, output
    one_host = run_forked("train", config, "parallel.world_size=2",
                          f"training.path={tmp_path / 'one_host'}", cwd=tmp_path)  # fmt: skip
    assert one_host.returncode == 0, one_host.stderr
    two = json.loads((tmp_path / "two_hosts" / "summary.json").read_text())
    one = json.loads((tmp_path / "one_host" / "summary.json").read_text())
    assert two["world_size"] == one["world_size"] == 2
    # gloo's all-reduce over the network and the shared-memory sum on one host add the same
    # two gradients, possibly in another order: float32 rounding, carried by Adam over 3 epochs
    assert two["test_accuracy"] == one["test_accuracy"]  # a count over the same test graphs
    assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-3)
    assert "gradients averaged via gloo" in (tmp_path / "two_hosts" / "train.log").read_text()


BOOM = '''
import torch
import torch.distributed as dist
from torch import nn
from torch_geometric.nn import global_mean_pool


class Boom(nn.Module):
    """A small model of one's own, whose rank 1 raises at its third training step."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        ((self.name, (size, _)),) = outputs.items()  # one task: {name: (outputs, level)}
        self.linear = nn.Linear(in_channels, size)
        self.calls = 0

    def forward(self, batch):
        self.calls += self.training
        if self.training and dist.get_rank() == 1 and self.calls == 3:
            raise ValueError("boom on purpose")
        return {self.name: self.linear(global_mean_pool(batch.x, batch.batch))}


class Slow(Boom):
    """As Boom without failing: a tenth of a second a step, to be killed in the middle."""

    def forward(self, batch):
        import time

        time.sleep(0.1)
        return {self.name: self.linear(global_mean_pool(batch.x, batch.batch))}


class Busy(Boom):
    """As Boom, and rank 0 computes alone for two minutes at that step (as a rank waits in an
    NCCL collective, or validates alone): only the watcher can end it sooner."""

    def forward(self, batch):
        if self.training and dist.get_rank() == 0 and self.calls == 2:
            import time

            time.sleep(120)
        return super().forward(batch)
'''


def test_a_rank_that_fails_on_one_host_ends_both_naming_its_rank_host_and_error(
    tmp_path, data_root
):
    (tmp_path / "boom.py").write_text(BOOM)
    config = write_config(tmp_path, data_root, model={"type": "boom.Boom"})
    with two_hosts() as hosts:
        results = run_on_both(hosts, tmp_path, config, wait_s=30 + 60)
    (code0, out0, _), (code1, out1, _) = results
    assert code0 != 0 and code1 != 0
    told = "rank 1 (node1)"
    assert told in out0 and "ValueError: boom on purpose" in out0, out0
    assert "boom on purpose" in out1, out1


def test_a_rank_busy_alone_when_another_fails_ends_within_seconds(tmp_path, data_root):
    (tmp_path / "boom.py").write_text(BOOM)
    config = write_config(tmp_path, data_root, model={"type": "boom.Busy"})
    with two_hosts() as hosts:
        (code0, out0, seconds0), _ = run_on_both(hosts, tmp_path, config, wait_s=100)
    assert code0 != 0
    assert "error: [RANK 0] rank 1 (node1) failed: ValueError: boom on purpose" in out0, out0
    # the failure comes a few seconds in; the watcher ends rank 0 GRACE_S (10 s) after it,
    # long before its two minutes alone would have
    assert seconds0 < 60, seconds0


def test_a_host_that_goes_down_is_named_by_the_other(tmp_path, data_root):
    (tmp_path / "boom.py").write_text(BOOM)
    config = write_config(tmp_path, data_root, model={"type": "boom.Slow"},
                          training={"num_epochs": 100})  # fmt: skip
    with two_hosts() as hosts:
        procs = start_on_both(hosts, tmp_path, config, "log_level=INFO", launcher="srun")
        deadline = time.monotonic() + 120
        while "started: rank 1" not in (tmp_path / "host1.log").read_text():
            assert time.monotonic() < deadline and procs[1].poll() is None
            time.sleep(0.2)
        time.sleep(2)  # some steps in
        down = time.monotonic()
        hosts[1].go_down()
        code0 = procs[0].wait(timeout=30 + 15)  # parallel.timeout_s + 15 s
        ended = time.monotonic() - down
    out0 = (tmp_path / "host0.log").read_text()
    assert code0 != 0
    assert "lost contact with rank 1 (node1), which stopped answering" in out0, out0
    assert ended < 30, ended


def test_a_killed_host_replaced_under_torchrun_resumes_to_the_uninterrupted_result(
    tmp_path, data_root
):
    """torchrun's c10d rendezvous with --max-restarts=1: host 1 goes down after an epoch and
    a new torchrun starts on it (a replaced node). The surviving agent restarts its worker, the
    two meet in a new round, and every rank resumes, the new host's too, whose agent has not
    restarted anything. Each host is held to one core, as each of two processes on one host
    is, so that the uninterrupted one-host job computes with the same kernels."""
    (tmp_path / "boom.py").write_text(BOOM)
    config = write_config(tmp_path, data_root, model={"type": "boom.Slow"},
                          training={"num_epochs": 4, "drop_last": True})  # fmt: skip
    command = [
        TORCHRUN, "--nnodes=2", "--nproc-per-node=1", "--rdzv-id=qg-test", "--max-restarts=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={ADDRESSES[0]}:{PORT}",
        "-m", "QuantumGravPy", "train", str(config), f"parallel.interface={INTERFACE}",
        f"training.path={tmp_path / 'replaced'}", "log_level=INFO",
    ]  # fmt: skip
    # torchrun's agents share one store across rounds unless told not to; a new agent then
    # waits for keys the old round's agents wrote once (torch 2.13), so docs/distributed.md
    # gives this variable for jobs whose hosts may be replaced
    env = clean_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    log = tmp_path / "replaced" / "train.log"
    with two_hosts() as hosts:
        procs = [
            host.popen(["taskset", "-c", str(i), *command], env=env, cwd=tmp_path,
                       log=tmp_path / f"host{i}.log")
            for i, host in enumerate(hosts)
        ]  # fmt: skip
        deadline = time.monotonic() + 120
        while not (log.exists() and "epoch 1/4" in log.read_text()):
            assert time.monotonic() < deadline and procs[1].poll() is None
            time.sleep(0.1)
        hosts[1].go_down()
        procs[1].wait(timeout=30)
        procs[1] = hosts[1].popen(["taskset", "-c", "1", *command], env=env, cwd=tmp_path,
                                  log=tmp_path / "host1-replaced.log")  # fmt: skip
        codes = [p.wait(timeout=180) for p in procs]
    logs = [(tmp_path / name).read_text() for name in ("host0.log", "host1-replaced.log")]
    assert codes == [0, 0], logs
    assert "resumed from" in log.read_text(), log.read_text()
    one_host = run_forked("train", config, "parallel.world_size=2", "training.num_epochs=4",
                          "training.drop_last=true", f"training.path={tmp_path / 'one_host'}",
                          cwd=tmp_path, cores={0, 1})  # fmt: skip
    assert one_host.returncode == 0, one_host.stderr
    replaced, uninterrupted = (run_record(tmp_path / name) for name in ("replaced", "one_host"))
    assert [row["epoch"] for row in replaced[0]] == ["1", "2", "3", "4"]  # each epoch once
    # the same sums in the same kernels (two addends add alike in any order): the same bits
    assert replaced[0] == uninterrupted[0]
    assert replaced[1].keys() == uninterrupted[1].keys()
    assert all(torch.equal(replaced[1][k], uninterrupted[1][k]) for k in replaced[1])


def run_record(run: Path) -> tuple[list[dict], dict]:
    """A run's history (without its times) and its last weights."""
    with open(run / "history.csv") as f:
        history = [
            {k: v for k, v in row.items() if k != "epoch_seconds"} for row in csv.DictReader(f)
        ]
    return history, torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


def test_a_host_whose_name_resolves_to_a_loopback_address_is_refused_with_the_fix(
    tmp_path, data_root
):
    config = write_config(tmp_path, data_root)
    with two_hosts(resolve="loopback") as hosts:
        results = run_on_both(hosts, tmp_path, config, wait_s=30 + 30, launcher="torchrun")
    for i, (_, output, seconds) in enumerate(results):
        line = [x for x in output.splitlines() if x.startswith("error:")]
        assert line, output
        assert f"this host's name 'node{i}' resolves to 127.0.1.1, a loopback address" in line[0]
        assert "parallel.interface" in line[0] and INTERFACE in line[0], line[0]
        assert seconds < 30, (seconds, output)  # at once, not after a timeout


def test_the_loopback_interface_named_for_two_hosts_is_refused_on_both_at_once(tmp_path, data_root):
    config = write_config(tmp_path, data_root)
    with two_hosts() as hosts:
        results = run_on_both(hosts, tmp_path, config, "parallel.interface=lo", wait_s=30 + 30)
    for code, output, seconds in results:
        line = [x for x in output.splitlines() if x.startswith("error:")]
        assert code == 2 and len(line) == 1, output  # the user's mistake: exit status 2
        assert "parallel.interface (GLOO_SOCKET_IFNAME): 'lo' has the loopback address" in line[0]
        assert INTERFACE in line[0], line[0]  # the interface to name instead
        assert seconds < 30, (seconds, output)  # at once, not after a timeout


SLOW = """
import time


def pause(graph):
    time.sleep(0.07)  # 400 graphs: 28 s, more than 3 x parallel.timeout_s
    return graph
"""


def test_data_prepared_for_longer_than_the_timeout_is_waited_for_and_built_once(tmp_path):
    """Both hosts start together on a shared file system with no cache: rank 0 builds it
    (once, for both), the other waits past parallel.timeout_s, saying so, and then trains."""
    save_graphs(tmp_path / "graphs.pt", 400)
    (tmp_path / "slow.py").write_text(SLOW)
    raw = {
        "log_level": "INFO",
        "data": {"files": [str(tmp_path / "graphs.pt")], "root": str(tmp_path / "data"),
                 "pre_transform": "slow.pause"},
        "tasks": [{"name": "y", "target": "y"}],
        "model": {"hidden_channels": 8, "num_layers": 1, "head_channels": [8]},
        "training": {"path": str(tmp_path / "run"), "device": "cpu", "num_epochs": 1,
                     "plots": False},
        "parallel": {"timeout_s": 8},
    }  # fmt: skip
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    with two_hosts() as hosts:
        # torchrun, one process on each host, as the issue's own two-process torchrun job
        results = run_on_both(hosts, tmp_path, config, wait_s=180, launcher="torchrun")
    (code0, out0, _), (code1, out1, _) = results
    assert code0 == 0 and code1 == 0, out0 + out1
    assert (out0 + out1).count("processing 400 samples") == 1, out0 + out1
    assert "[RANK 1] INFO waiting for rank 0 to prepare the data" in out1, out1
    assert (tmp_path / "run" / "summary.json").is_file()


def test_torchrun_with_c10d_rendezvous_as_pytorch_documents_it(tmp_path, data_root):
    """The elastic launcher's own rendezvous (--rdzv-backend=c10d) instead of a static
    master: the agent on the endpoint's host holds the store, and the job meets through it."""
    config = write_config(tmp_path, data_root)
    command = [
        TORCHRUN, "--nnodes=2", "--nproc-per-node=1", "--rdzv-id=qg-test",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={ADDRESSES[0]}:{PORT}",
        "-m", "QuantumGravPy", "train", str(config), f"parallel.interface={INTERFACE}",
    ]  # fmt: skip
    with two_hosts() as hosts:
        procs = [
            host.popen(command, env=clean_env(), cwd=tmp_path, log=tmp_path / f"host{i}.log")
            for i, host in enumerate(hosts)
        ]
        codes = [p.wait(timeout=200) for p in procs]
    logs = [(tmp_path / f"host{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["world_size"] == 2


def test_a_host_that_never_joins_ends_the_other_within_the_timeout(tmp_path, data_root):
    """Two jobs at once, each with one host missing: in the first the second node never
    starts, in the second (another job id, so another port) the first node, which holds the
    store, never does. Each ends within the timeout naming the rank, and its node, that is
    missing."""
    config = write_config(tmp_path, data_root)
    argv = [sys.executable, "-m", "QuantumGravPy", "train", str(config), "parallel.timeout_s=10",
            "log_level=INFO"]  # fmt: skip
    logs = [tmp_path / "host0.log", tmp_path / "host1.log"]
    with two_hosts() as hosts:
        alone = [
            hosts[0].popen(argv, env=clean_env(**srun_task(0)), cwd=tmp_path, log=logs[0]),
            hosts[1].popen(argv, env=clean_env(**srun_task(1) | {"SLURM_JOB_ID": "4343"}),
                           cwd=tmp_path, log=logs[1]),
        ]  # fmt: skip
        # from the moment each starts to meet the others (an interpreter's start-up on a busy
        # machine is not the job's to answer for) to its end
        meeting, ended = [None, None], [None, None]
        deadline = time.monotonic() + 120
        while None in ended and time.monotonic() < deadline:
            for i, (proc, log) in enumerate(zip(alone, logs, strict=True)):
                if meeting[i] is None and "meeting the others at" in log.read_text():
                    meeting[i] = time.monotonic()
                if ended[i] is None and proc.poll() is not None:
                    ended[i] = time.monotonic()
            time.sleep(0.05)
        for proc in alone:
            if proc.poll() is None:
                proc.kill()
    missing = {0: "rank 1 (on node1) never joined",
               1: "rank 0 (on node0), which holds the job's store, never answered"}  # fmt: skip
    for i, port in enumerate((24242, 24343)):
        out = logs[i].read_text()
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert alone[i].returncode == 1 and len(errors) == 1, out  # not the user's mistake
        assert f"not all 2 ranks met at node0:{port} within 10 s (parallel.timeout_s)" in errors[0]
        assert errors[0].endswith(missing[i]), errors[0]
        assert meeting[i] is not None and ended[i] - meeting[i] < 10 + 15, (meeting, ended)
