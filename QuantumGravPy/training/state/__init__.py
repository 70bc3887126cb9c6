"""What a run keeps and resumes from: its counters, history and random states
(:mod:`.run_state`), the moving average of the weights (:mod:`.ema`), early stopping
(:mod:`.early_stopping`), what a checkpoint holds and resuming from one
(:mod:`.checkpointing`), what the run writes as it goes (:mod:`.records`), the listeners that
do the library's work at each point of a run (:mod:`.listeners`), and the user's callbacks,
listeners told last (:mod:`.callbacks`).

Above :mod:`..evaluation` and :mod:`..monitoring`, below the loop.
"""
