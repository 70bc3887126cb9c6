"""The errors of a distributed job: it could not start, or a rank failed or fell silent."""

from __future__ import annotations

from ..errors import QGError


class DistributedError(QGError):
    """The process group could not be set up, or a collective failed."""


class PortInUseError(DistributedError):
    """The rendezvous port is taken by another program."""

    def __init__(self, addr: str, port: int):
        super().__init__(
            f"port {port} on {addr} is already in use; set parallel.master_port to a free port, "
            "or leave it null to have one chosen"
        )
        self.port = port


class RankTimeoutError(DistributedError):
    """Another rank did not arrive at a collective within the timeout (not a mistake of the
    user's: the command line exits with status 1)."""

    users = False


class RankFailedError(DistributedError):
    """Another rank failed; this one stops instead of waiting for it. ``users``: whether the
    failure was a mistake of the user's (bad input; exit status 2) or not (exit status 1)."""

    def __init__(self, message: str, *, users: bool = False):
        super().__init__(message)
        self.users = users
