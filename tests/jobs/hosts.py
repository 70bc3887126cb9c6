"""Two hosts on one machine, for the tests of jobs that span machines.

Each host is a network namespace with its own address on a veth pair (10.77.0.1 and
10.77.0.2, the only addresses a test contacts), and each command run on it gets its own
hostname (a UTS namespace) and its own ``/dev/shm`` (a mount namespace): what two nodes of a
cluster share, and what they do not. ``ip netns exec`` puts ``/etc/netns/NAME/hosts`` over
``/etc/hosts``: a test decides whether a host's name resolves to its address, to a loopback
address (as on many installations), or not at all.

Making namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); where they cannot be made,
:func:`two_hosts` skips the test with one line saying why.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

ADDRESSES = ("10.77.0.1", "10.77.0.2")
INTERFACE = "qgeth"  # the veth end's name on both hosts, as eth0 would be on two nodes

# each host's /dev/shm is a fresh tmpfs; then the command runs under the given hostname. The
# rest of the file system is shared, as a cluster's home and scratch file systems are.
_ENTER = 'hostname "$0" && mount -t tmpfs -o size=1g qgshm /dev/shm && exec "$@"'


class Host:
    """One namespace: run commands on it with :meth:`popen`."""

    def __init__(self, namespace: str, address: str, hostname: str):
        self.namespace, self.address, self.hostname = namespace, address, hostname

    def command(self, argv: Sequence[str]) -> list[str]:
        return [
            "ip", "netns", "exec", self.namespace,
            "unshare", "--uts", "--mount", "--propagation", "private", "--",
            "sh", "-c", _ENTER, self.hostname, *map(str, argv),
        ]  # fmt: skip

    def popen(self, argv: Sequence[str], *, env: dict, cwd: Path, log: Path) -> subprocess.Popen:
        """``argv`` started on this host, its output (both streams) into ``log``."""
        out = open(log, "w")  # closed with the process by the caller
        return subprocess.Popen(
            self.command(argv), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def go_down(self) -> None:
        """Every process of this host killed at once, as when a machine fails."""
        pids = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, timeout=30
        ).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextmanager
def two_hosts(
    hostnames: tuple[str, str] = ("node0", "node1"), *, resolve: str = "address"
) -> Iterator[tuple[Host, Host]]:
    """Two hosts joined by a veth pair, removed afterwards. ``resolve``: what each host's
    name resolves to there, ``address`` (its own address), ``loopback`` (127.0.1.1, as
    Debian's installer writes) or ``nothing``."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("two hosts need root and iproute2/util-linux (ip netns, unshare)")
    tag = uuid.uuid4().hex[:6]
    names = [f"qg{tag}{i}" for i in range(2)]
    made: list[str] = []
    try:
        for name in names:
            _ip("netns", "add", name)
            made.append(name)
        _ip("link", "add", f"qv{tag}0", "type", "veth", "peer", "name", f"qv{tag}1")
        for i, name in enumerate(names):
            _ip("link", "set", f"qv{tag}{i}", "netns", name)
            _ip("-n", name, "link", "set", f"qv{tag}{i}", "name", INTERFACE)
            _ip("-n", name, "addr", "add", f"{ADDRESSES[i]}/24", "dev", INTERFACE)
            _ip("-n", name, "link", "set", INTERFACE, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / name
            etc.mkdir(parents=True, exist_ok=True)
            lines = ["127.0.0.1 localhost"]
            if resolve == "address":
                lines += [f"{ADDRESSES[j]} {hostnames[j]}" for j in range(2)]
            elif resolve == "loopback":
                lines += [f"127.0.1.1 {hostnames[i]}"]
            (etc / "hosts").write_text("\n".join(lines) + "\n")
    except subprocess.CalledProcessError as e:
        _remove(made)
        pytest.skip(f"cannot make network namespaces here: {e.stderr.strip() or e}")
    try:
        yield tuple(Host(n, a, h) for n, a, h in zip(names, ADDRESSES, hostnames, strict=True))
    finally:
        _remove(made)


def _remove(namespaces: list[str]) -> None:
    for name in namespaces:
        # what still runs in it would keep it: its processes end with the test's own waits
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
