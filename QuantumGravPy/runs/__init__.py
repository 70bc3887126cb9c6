"""The runs layer: the files a run leaves on disk, and how a run is continued from them (the
objects that write them as a run goes are the training layer's records room).

- :mod:`.layout`: the run directory's files, the guard against overwriting a finished run;
- :mod:`.checkpoint`: atomic, code-free checkpoint files;
- :mod:`.resume`: reading ``last.pt`` and checking that a resumed config trains the same thing;
- :mod:`.reproducibility`: seeds and random states, the world-size conditions, the software and
  machine of every start;
- :mod:`.plots`: curves and confusion matrices of one run or several.

Every writer here is called by the main process only (the trainer guards the calls); nothing
here starts processes or talks to other ranks. Imports ``config`` and the ground floor.
"""

from .checkpoint import FORMAT_VERSION, load_checkpoint, load_model_state, save_checkpoint
from .reproducibility import seed_everything
from .resume import check_resumable, read_resume_state

__all__ = [
    "FORMAT_VERSION",
    "check_resumable",
    "load_checkpoint",
    "load_model_state",
    "read_resume_state",
    "save_checkpoint",
    "seed_everything",
]
