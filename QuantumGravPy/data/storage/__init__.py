"""Where prepared graphs are kept, and how they are built with several processes.

- :mod:`.cache`: graphs processed once and cached in a file named by a digest of their inputs
  (the graphs come from a :class:`~.cache.GraphSource`: generated causal sets or files);
- :mod:`.disk`: graphs kept in an SQLite table (``data.storage: disk``), one row each in the
  form :mod:`.rows` writes, read a batch at a time;
- :mod:`.saved_graphs`: graphs saved with ``torch.save``, read without running code;
- :mod:`.ranges`: contiguous ranges of work per rank, run in parallel processes, whose graphs
  come back as columns (:mod:`.columns`).

The bottom room of ``data``: it imports nothing from ``sources`` or ``batches``.
"""
