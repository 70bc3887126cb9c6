"""What a run keeps and resumes from: its counters, history and random states
(:mod:`.run_state`), the moving average of the weights (:mod:`.ema`), early stopping
(:mod:`.early_stopping`), what a checkpoint holds and resuming from one
(:mod:`.checkpointing`), what the run writes as it goes (:mod:`.records`), and the user's
callbacks told of it (:mod:`.callbacks`).

Above :mod:`..evaluation` and :mod:`..monitoring`, below the loop.
"""
