"""Imported by every Python process of a test job whose PYTHONPATH holds this directory.

``QG_TEST_KILL_IN_WRITE=N`` kills the job in the middle of the N-th write of ``last.pt``: the
temporary file is cut to half its size (as if the write had stopped there) and then the whole
process group (``QG_TEST_KILL_SCOPE=group``, the default, as a preemption does) or only this
process (``process``) gets SIGKILL. Only while ``TORCHELASTIC_RESTART_COUNT`` is 0 or unset, so a
job restarted by torchrun runs normally.
"""

import os
import signal

_AT = int(os.environ.get("QG_TEST_KILL_IN_WRITE", "0"))

if _AT and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) == 0:
    _real_fsync = os.fsync
    _writes = 0

    def _fsync(fd):
        global _writes
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if ".last.pt.tmp" in os.path.basename(name):
            _writes += 1
            if _writes == _AT:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
                if os.environ.get("QG_TEST_KILL_SCOPE", "group") == "process":
                    os.kill(os.getpid(), signal.SIGKILL)
                os.killpg(os.getpgid(0), signal.SIGKILL)
        return _real_fsync(fd)

    os.fsync = _fsync
