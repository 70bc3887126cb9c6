"""Prediction with a trained model: :func:`load_model` brings a run's model back with what it
needs to read new data; :func:`predict` runs it over new Zarr/HDF5 files (or the run's own
data) in input order, with where each row came from, on any number of processes;
:func:`sample` draws causal sets from a generative model into a file, with a report.

Imports ``training`` (the evaluation and the tasks), ``data`` (the same readers and batches as
training), ``models``, ``runs`` and ``parallel``; ``qg predict`` is the command over it.
"""

from .model import LoadedModel, load_model
from .outputs import Predictions, read
from .run import predict
from .sampling import sample

__all__ = ["LoadedModel", "Predictions", "load_model", "predict", "read", "sample"]
