"""What the forkserver imports before it forks any rank: the package, and a quick exit.

Importing this module imports ``QuantumGravPy`` (its parent package), so every rank forked from
the server starts with torch and the package already imported.

A quick exit: a process that imported torch, torch_geometric and torchmetrics holds millions of
objects, and the garbage collections Python runs while it shuts down walk all of them, 1 to
1.5 s per process once its work is done. ``gc.freeze()`` moves them out of the collector's
sight; reference counting still releases them as the modules are cleared, and the other exit
handlers (logging's flush) still run. The ``qg`` program (:func:`QuantumGravPy.cli.run`) and
every spawned rank (once its result is written and its process group left) freeze the same way;
here the server does, when it ends with the program that started it.
"""

import atexit
import gc

atexit.register(gc.freeze)
