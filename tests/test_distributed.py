"""The distributed module in one process: launch environments, device ids, ports, no-op collectives."""

import socket

import pytest
import torch

import QuantumGravPy as qg
from QuantumGravPy.parallel import distributed
from QuantumGravPy.parallel.distributed import (
    ddp_device_ids,
    first_slurm_host,
    hosts_of_ranks,
    process_env,
)


def test_torchrun_variables_are_read():
    env = process_env(
        {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "node7",
            "MASTER_PORT": "29400",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (5, 8, 1, 4)
    assert (env.master_addr, env.master_port, env.launcher) == ("node7", 29400, "torchrun")


def test_slurm_variables_are_read_with_the_first_node_as_master():
    env = process_env(
        {
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "1",
            "SLURM_TASKS_PER_NODE": "2(x2)",
            "SLURM_JOB_NODELIST": "gpu[07-08]",
            "SLURM_JOB_ID": "123456",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert env.master_addr == "gpu07" and env.launcher == "slurm"
    assert env.master_port == 20000 + 123456 % 20000  # the same on every task, no talking


@pytest.mark.parametrize(
    "nodelist, first",
    [
        ("node1", "node1"),
        ("gpu[03-05,07]", "gpu03"),
        ("gpu[12,3-4],cpu[1-2]", "gpu12"),
        ("a-b-1,c2", "a-b-1"),
    ],
)
def test_first_host_of_a_slurm_nodelist(nodelist, first):
    assert first_slurm_host(nodelist) == first


def test_the_host_of_each_rank_of_a_slurm_step_is_known_for_naming_a_missing_one():
    env = {"SLURM_JOB_NODELIST": "gpu[08-10,7],cpu1", "SLURM_TASKS_PER_NODE": "2(x3),1,1",
           "SLURM_PROCID": "3"}  # fmt: skip
    expected = ["gpu08"] * 2 + ["gpu09"] * 2 + ["gpu10"] * 2 + ["gpu7", "cpu1"]
    assert hosts_of_ranks(8, env) == expected
    assert hosts_of_ranks(4, dict(env, SLURM_JOB_NODELIST="a[1-2],b[01-02]",
                                  SLURM_TASKS_PER_NODE="1(x4)")) == ["a1", "a2", "b01", "b02"]  # fmt: skip
    # what cannot be told for sure says nothing rather than something wrong: counts that do
    # not match the nodes or the job, a list of another form, another distribution, torchrun
    # inside an allocation, processes spawned in one (no srun task)
    assert hosts_of_ranks(8, dict(env, SLURM_TASKS_PER_NODE="2(x3)")) is None
    assert hosts_of_ranks(2, env) is None
    assert hosts_of_ranks(2, dict(env, SLURM_JOB_NODELIST="node[1-2]-ib",
                                  SLURM_TASKS_PER_NODE="1(x2)")) is None  # fmt: skip
    assert hosts_of_ranks(8, dict(env, SLURM_DISTRIBUTION="cyclic")) is None
    assert hosts_of_ranks(8, {"RANK": "0", **env}) is None
    assert hosts_of_ranks(8, {k: v for k, v in env.items() if k != "SLURM_PROCID"}) is None


def test_no_launcher_and_single_task_slurm_jobs_are_not_distributed():
    assert process_env({}) is None
    assert process_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None


def test_garbled_launcher_variables_are_a_clear_error():
    with pytest.raises(qg.DistributedError, match="environment variables"):
        process_env({"RANK": "zero", "WORLD_SIZE": "2"})


def test_device_ids_are_integers_on_cuda_and_none_on_cpu():
    ids = ddp_device_ids(torch.device("cuda", 3))
    assert ids == [3] and all(type(i) is int for i in ids)
    assert ddp_device_ids(torch.device("cpu")) is None


def test_collectives_are_no_ops_in_a_single_process():
    assert not distributed.is_initialized()
    assert distributed.get_rank() == 0 and distributed.get_world_size() == 1
    assert distributed.is_main()
    distributed.barrier()
    assert distributed.broadcast_object({"a": 1}) == {"a": 1}
    t = torch.tensor([1.0, 2.0])
    assert distributed.all_reduce_sum(t) is t and t.tolist() == [1.0, 2.0]
    assert distributed.all_gather_object(7) == [7]


def test_a_port_in_use_is_named(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(qg.PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            qg.initialize_ddp(0, 1, master_port=str(port), backend="gloo")
    assert not distributed.is_initialized()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rank": 2, "world_size": 2}, "rank 2 is outside"),
        ({"rank": 0, "world_size": 2}, "master_port is needed"),
        ({"rank": 0, "world_size": 1, "master_port": "http"}, "must be a port number"),
        ({"rank": 0, "world_size": 1, "backend": "mpi"}, "backend must be auto, nccl or gloo"),
    ],
)
def test_impossible_arguments_are_refused(kwargs, message, monkeypatch):
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(qg.DistributedError, match=message):
        qg.initialize_ddp(**kwargs)


def test_one_process_group_and_trainer_ddp_in_this_process(make_config):
    """What a notebook does: a one-process group, then TrainerDDP like any trainer."""
    cfg = make_config("training.num_epochs=2")
    with pytest.raises(qg.DistributedError, match="call qg.initialize_ddp"):
        qg.TrainerDDP(0, cfg)
    qg.initialize_ddp(0, 1, backend="gloo")
    try:
        trainer = qg.TrainerDDP(0, cfg)
        loaders = trainer.prepare_dataloaders()
        history = trainer.run_training(loaders[0], loaders[1])
        trainer.close()
        assert [row["epoch"] for row in history] == [1, 2] and trainer.world_size == 1
    finally:
        qg.cleanup_ddp()
    assert not distributed.is_initialized()


def test_auto_backend_follows_the_training_device(make_config, monkeypatch):
    from QuantumGravPy.parallel import resolve_backend

    def backend(*overrides: str) -> str:
        config = make_config(*overrides)
        return resolve_backend(config.parallel, config.training.device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backend("training.device=auto") == "nccl"
    assert backend("training.device=cpu") == "gloo"  # never NCCL on CPU
    assert backend("parallel.backend=gloo", "training.device=cuda") == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backend("training.device=auto") == "gloo"


def join_three(rank, port, delay_s, queue):
    """Rank ``rank`` of a job of three, joining ``delay_s`` late; puts what it ended with."""
    import time

    from QuantumGravPy.parallel import distributed

    time.sleep(delay_s)
    try:
        distributed.initialize_ddp(rank, 3, "127.0.0.1", port, "gloo", timeout_s=3)
        distributed.cleanup_ddp()
        queue.put((rank, "joined"))
    except Exception as e:
        queue.put((rank, f"{type(e).__name__}: {e}"))


@pytest.mark.timeout(60)
def test_every_rank_that_joined_names_the_same_missing_one():
    """Rank 2 of three never comes. Rank 0, which holds the store, gives up first; rank 1,
    which came later, must still name rank 2, not find the store gone."""
    import multiprocessing

    from QuantumGravPy.parallel.distributed import free_port

    context = multiprocessing.get_context("forkserver")
    queue, port = context.Queue(), free_port()
    ranks = [context.Process(target=join_three, args=(r, port, r * 1.5, queue)) for r in (0, 1)]
    for process in ranks:
        process.start()
    ended = dict(queue.get(timeout=45) for _ in ranks)
    for process in ranks:
        process.join(10)
    for rank in (0, 1):
        assert ended[rank].startswith("RankTimeoutError: not all 3 ranks met"), ended
        assert ended[rank].endswith("rank 2 never joined"), ended
