"""Where the graphs come from and what they hold.

- :mod:`.causal_sets`, :mod:`.kinds`: the embedded dataset, causal sets generated as graphs;
- :mod:`.files`, :mod:`.causal_set_files`, :mod:`.graph_files`, :mod:`.stores`, :mod:`.formats`,
  :mod:`.zarr2`: causal sets and general graphs read from Zarr stores, HDF5 files and saved
  graphs;
  :mod:`.writing`: causal sets written as QuantumGrav.jl writes them;
- :mod:`.pair_targets`: the pairs of edge-level tasks, and the targets read at them;
- :mod:`.datasets`: the dataset a config names, in the storage it chooses;
- :mod:`.targets`, :mod:`.checks`, :mod:`.digest`, :mod:`.provenance`: what the tasks read of
  the data, a user's graphs checked, the same graphs on every rank, where each graph came from.

Imports ``storage`` (a dataset is cached or kept on disk there); nothing from ``batches``.
"""
