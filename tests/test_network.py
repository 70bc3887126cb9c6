"""A job of several hosts refuses, before it meets, an interface the other hosts could not
reach it through: one line naming the key and the interfaces this host has (exit status 2)."""

import pytest
from conftest import assert_refused, run_main

from QuantumGravPy.errors import ConfigError
from QuantumGravPy.parallel import network
from QuantumGravPy.parallel.environment import ProcessEnv

# rank 0 of a job of one process on each of two hosts
TWO_HOSTS = ProcessEnv(rank=0, world_size=2, local_rank=0, local_world_size=1,
                       master_addr="10.77.0.1", master_port=29512, launcher="slurm")  # fmt: skip


def test_an_interface_the_host_lacks_is_refused_by_the_command_naming_the_ones_it_has(
    config_file, capsys, monkeypatch
):
    for key, value in {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                       "SLURM_JOB_NODELIST": "node[0-1]", "SLURM_TASKS_PER_NODE": "1(x2)",
                       "SLURM_JOB_ID": "7"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    result = run_main(capsys, "train", config_file(), "parallel.interface=nope0")
    assert_refused(result, "parallel.interface", "no interface 'nope0'", "lo")


def test_the_loopback_interface_is_refused_for_a_job_of_several_hosts(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    with pytest.raises(ConfigError, match="'lo' has the loopback address 127.0.0.1, which the"):
        network.check_reachable(TWO_HOSTS, "gloo")
    # on one host (a job told to meet at a loopback address) it is what the ranks need
    one_host = ProcessEnv(**{**TWO_HOSTS.__dict__, "master_addr": "127.0.0.1"})
    network.check_reachable(one_host, "gloo")


def test_a_list_of_interfaces_is_checked_one_by_one(monkeypatch):
    """gloo takes a comma-separated list; an interface with no IPv4 address (IPv6 only, say)
    is left to gloo."""
    monkeypatch.setattr(network, "interface_address", {"eth0": "10.0.0.5", "lo": "127.0.0.1"}.get)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0,ib0")
    network.check_reachable(TWO_HOSTS, "gloo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0,lo")
    with pytest.raises(ConfigError, match="'lo' has the loopback address 127.0.0.1"):
        network.check_reachable(TWO_HOSTS, "gloo")
