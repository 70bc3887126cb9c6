"""The address a rank gives the other hosts of a job that spans machines.

gloo finds the address it tells the other ranks from the host's name. Where that name resolves
to a loopback address (127.0.1.1, which many installations write into ``/etc/hosts``) or to
nothing, gloo falls back to 127.0.0.1 and the other hosts connect to themselves: one fails
after seconds with ``connectFullMesh failed``, another waits out a connect timeout that
``parallel.timeout_s`` does not govern. Naming the interface that joins the hosts
(``parallel.interface``, or ``GLOO_SOCKET_IFNAME``) makes gloo use that interface's address;
NCCL's own sockets take the same name (``NCCL_SOCKET_IFNAME``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

from ..errors import ConfigError
from .environment import ProcessEnv
from .errors import DistributedError


def interfaces() -> list[str]:
    """This host's network interfaces, by name."""
    return [name for _, name in socket.if_nameindex()]


def use_interface(name: str | None) -> None:
    """``parallel.interface``: gloo and NCCL use ``name``, which this host must have."""
    if name is None:
        return
    held = interfaces()
    if name not in held:
        raise ConfigError(
            f"parallel.interface: this host ({socket.gethostname()}) has no interface {name!r} "
            f"(it has {', '.join(held)})"
        )
    os.environ["GLOO_SOCKET_IFNAME"] = name
    os.environ["NCCL_SOCKET_IFNAME"] = name


def check_reachable(env: ProcessEnv, backend: str) -> None:
    """Before a job of several hosts meets: refuse a host the others could not reach, because
    gloo would give them a loopback address for it. Jobs on one host (all ranks here, or a
    rendezvous on a loopback address) and named interfaces are left alone."""
    if backend != "gloo" or env.local_world_size >= env.world_size:
        return
    if _loopback_address(env.master_addr):
        return  # a job told to meet at 127.0.0.1 is on one machine, whatever it says
    named = os.environ.get("GLOO_SOCKET_IFNAME")
    if named:
        _check_interface(named)
        return
    name = socket.gethostname()
    try:
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(name, None)})
    except OSError:
        addresses = []
    if addresses and not all(_loopback(a) for a in addresses):
        return
    what = (
        f"resolves to {', '.join(addresses)}, a loopback address"
        if addresses
        else "resolves to no address"
    )
    others = [i for i in interfaces() if i != "lo"] or ["none found"]
    raise DistributedError(
        f"this host's name {name!r} {what}, which gloo would give the other hosts of this "
        f"{env.world_size}-process job to reach it; set parallel.interface to the network "
        f"interface that joins the hosts (this host has {', '.join(others)}), or "
        "GLOO_SOCKET_IFNAME"
    )


def _check_interface(names: str) -> None:
    """The interfaces named for a job of several hosts (one, or a comma-separated list as gloo
    takes them) must not be the loopback one, whose address the other hosts cannot reach."""
    for name in names.split(","):
        address = interface_address(name.strip())
        if address is None or not _loopback(address):
            continue  # another address (or only IPv6 ones): left to gloo
        others = [i for i in interfaces() if i not in ("lo", name)] or ["none found"]
        raise ConfigError(
            f"parallel.interface (GLOO_SOCKET_IFNAME): {name!r} has the loopback address "
            f"{address}, which the other hosts cannot reach; name the interface that joins the "
            f"hosts (this host has {', '.join(others)})"
        )


def interface_address(name: str) -> str | None:
    """The IPv4 address of this host's interface ``name``, or None (no such interface, none
    assigned, or not Linux)."""
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = struct.pack("256s", name[:15].encode())
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
    except (OSError, ImportError):
        return None
    return socket.inet_ntoa(answer[20:24])


_SIOCGIFADDR = 0x8915  # Linux: an interface's address


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address.split("%")[0]).is_loopback  # fe80::1%eth0: its scope


def _loopback_address(address: str) -> bool:
    """Whether ``address`` is a loopback address as written (a name is not: the first node of
    a SLURM job resolves to 127.0.1.1 on itself in the very trap checked for)."""
    try:
        return _loopback(address)
    except ValueError:
        return address == "localhost"
