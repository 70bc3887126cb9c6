"""What a run keeps from epoch to epoch: its counters, history and random states
(:mod:`.run_state`), the moving average of the weights (:mod:`.ema`), early stopping
(:mod:`.early_stopping`), the listeners that do the library's work at each point of a run
(:mod:`.listeners`), and the user's callbacks, listeners told last (:mod:`.callbacks`).

Above :mod:`..evaluation` and :mod:`..monitoring`, below :mod:`..records` and the loop.
"""
