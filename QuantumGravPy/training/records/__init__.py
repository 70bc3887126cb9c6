"""What a run writes as it goes, in one room: its directory (:mod:`.run_directory`: config,
log, history, trackers), its records each epoch (:mod:`.records`, a listener), its checkpoints
(:mod:`.checkpointing`), each a dict of the run's stateful parts (:mod:`.stateful`).

Above :mod:`..state`, below the loop. The files themselves (their names, the checkpoint format,
the lock, resume checks) are the runs layer's.
"""
