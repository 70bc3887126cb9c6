"""What each rank reads each epoch: samplers, loaders and the batches they assemble.

- :mod:`.loaders`: the seeded train/validation/test split and the loaders built on it;
- :mod:`.samplers`: samplers that stay correct under DDP; :mod:`.augment`: deterministic
  augmentation keyed by sample and epoch, or by rank;
- :mod:`.batching`, :mod:`.row_batches`, :mod:`.assembly`, :mod:`.chunks`: batches assembled by
  index arithmetic from the tensors in memory or the rows on disk, with no ``Data`` per graph;
- :mod:`.node_batches`, :mod:`.padding`: batches of equal work, and padded to fixed shapes;
- :mod:`.transfer`, :mod:`.prefetch`: a batch handed over by a worker process, and to the GPU,
  in one piece.

The top room of ``data``: imports ``sources`` and ``storage``; neither imports it.
"""
