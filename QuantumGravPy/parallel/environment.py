"""Where this process sits in a job that torchrun or srun started, from their variables."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import DistributedError


@dataclass(frozen=True)
class ProcessEnv:
    """Where this process sits in a job started by torchrun or srun."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int | None
    launcher: str  # "torchrun" or "slurm"


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """How often the launcher has restarted this job: torchrun's ``--max-restarts`` counter, or
    SLURM's requeue counter. A restarted job resumes its run instead of starting over."""
    env = os.environ if environ is None else environ
    for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise DistributedError(f"cannot read {name}={value!r}: not a number") from None
    return 0


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[03-05,07],cpu1`` -> ``gpu03``."""
    match = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise DistributedError(f"cannot read SLURM_JOB_NODELIST {nodelist!r}")
    prefix, _, ranges = match.groups()
    if ranges is None:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _slurm_tasks_per_node(value: str) -> int:
    # "4(x2),3" -> 4: the count on the first node, which is the one for local ranks on it at most
    return int(re.match(r"\d+", value).group())


def process_env(environ: Mapping[str, str] | None = None) -> ProcessEnv | None:
    """The job this process belongs to, from torchrun's or SLURM's variables; None if neither.

    torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    srun sets SLURM_PROCID, SLURM_NTASKS (SLURM_STEP_NUM_TASKS for the step), SLURM_LOCALID and
    SLURM_JOB_NODELIST; the master is the first node of the list, and the port comes from
    MASTER_PORT or, failing that, from the job id, so that every task agrees without talking.
    A SLURM job with one task is not a distributed job.
    """
    env = os.environ if environ is None else environ
    try:
        if "RANK" in env and "WORLD_SIZE" in env:
            rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
            local_rank = int(env.get("LOCAL_RANK", rank))
            port = env.get("MASTER_PORT")
            return ProcessEnv(
                rank=rank,
                world_size=world_size,
                local_rank=local_rank,
                local_world_size=int(env.get("LOCAL_WORLD_SIZE", world_size)),
                master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                master_port=int(port) if port else None,
                launcher="torchrun",
            )
        if "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
            world_size = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS")))
            if world_size < 2:
                return None
            nodelist = env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST", "127.0.0.1"))
            per_node = env.get("SLURM_STEP_TASKS_PER_NODE", env.get("SLURM_TASKS_PER_NODE"))
            port = env.get("MASTER_PORT")
            job_id = int(env.get("SLURM_JOB_ID", "0"))
            return ProcessEnv(
                rank=int(env["SLURM_PROCID"]),
                world_size=world_size,
                local_rank=int(env.get("SLURM_LOCALID", "0")),
                local_world_size=_slurm_tasks_per_node(per_node) if per_node else world_size,
                master_addr=env.get("MASTER_ADDR") or first_slurm_host(nodelist),
                master_port=int(port) if port else 20000 + job_id % 20000,
                launcher="slurm",
            )
    except ValueError as e:
        raise DistributedError(f"cannot read the launcher's environment variables: {e}") from e
    return None


def expand_nodelist(nodelist: str) -> list[str]:
    """Every host of a SLURM node list, in order: ``gpu[03-05,07],cpu1`` -> ``gpu03, gpu04,
    gpu05, gpu07, cpu1`` (numbers keep their zero padding). A list of another form (a suffix
    after the brackets, nested ones) raises ValueError rather than being guessed at."""
    tokens = list(_NODE_TOKEN.finditer(nodelist.strip()))
    if ",".join(token.group(0) for token in tokens) != nodelist.strip():
        raise ValueError(f"cannot read the node list {nodelist!r}")
    hosts = []
    for token in tokens:
        prefix, ranges = token.group(1), token.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            for number in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{number:0{len(first)}d}")
    return hosts


_NODE_TOKEN = re.compile(r"([^,\[\]]+)(?:\[([\d,-]+)\])?(?=,|$)")


def hosts_of_ranks(world_size: int, environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The host each of the ``world_size`` ranks of an srun job step runs on, by SLURM's
    default block distribution (the first node's tasks first), or None where that cannot be
    told for sure: not srun's tasks (torchrun's, or processes spawned in an allocation),
    another distribution, or a node list and task counts that do not add up to the job."""
    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_STEP_NODELIST", env.get("SLURM_JOB_NODELIST"))
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE", env.get("SLURM_TASKS_PER_NODE"))
    if not nodelist or not per_node or "RANK" in env or "SLURM_PROCID" not in env:
        return None
    if not env.get("SLURM_DISTRIBUTION", "block").startswith("block"):
        return None
    try:
        counts = []
        for count, repeat in re.findall(r"(\d+)(?:\(x(\d+)\))?", per_node):
            counts += [int(count)] * int(repeat or 1)
        hosts = expand_nodelist(nodelist)
    except ValueError:
        return None
    if len(counts) != len(hosts) or sum(counts) != world_size:
        return None
    return [host for host, count in zip(hosts, counts, strict=True) for _ in range(count)]
