"""A trained model back from its run directory: :func:`load_model`.

The run's ``config.yaml`` (with any overrides) says how the model is built and how its data
is read; the checkpoint holds the evaluation weights (the moving average, if the run kept
one), the regression targets' scaling and what the model was built from (``model_spec``:
node features, outputs per task, graph-level features), so no training data is needed.
A checkpoint written before ``model_spec`` was recorded falls back on the config's dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.data.data import BaseData

from ..config import Config, TaskConfig, config_to_dict, load_config, task_list
from ..config.dotted import config_folder
from ..data import dataset_from_config, graph_feature_width, num_node_features
from ..errors import CheckpointError, RunDirectoryError
from ..models import build_model
from ..parallel.devices import Placement, select_device
from ..runs import layout as rd
from ..runs.checkpoint import evaluation_weights, load_checkpoint, load_model_state
from ..training.evaluation.evaluator import to_device
from ..training.tasks.task import Task, build_tasks, select_outputs

BEST = "best.pt"


@dataclass
class LoadedModel:
    """A trained model in evaluation mode with what it needs to read new data.

    ``config``: the run's config as overridden (``data.*`` says how graphs are read);
    ``tasks``: its tasks, regression targets scaled as in training; ``checkpoint``: the file
    the weights came from. ``model(batch)`` gives raw outputs; :meth:`predict_batch` gives
    them in the targets' units.
    """

    model: nn.Module
    config: Config
    tasks: list[Task]
    checkpoint: Path
    device: torch.device
    spec: dict[str, Any]

    @property
    def placement(self) -> Placement:
        """Its device, and the precision it was trained in (as training places a model)."""
        return Placement.of(self.device, self.config.training.precision)

    @property
    def float_dtype(self) -> torch.dtype:
        return self.placement.float_dtype

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return self.placement.autocast_dtype

    def select(self, outputs: Any, batch: Any) -> dict[str, Tensor]:
        """Each task's output of a forward pass, checked (as in training)."""
        return select_outputs(self.tasks, outputs, batch, model=self.config.model.type)

    @torch.no_grad()
    def predict_batch(self, batch: Any) -> dict[str, Tensor]:
        """Each task's predictions for a batch of graphs (a ``Batch``, one ``Data`` or a list
        of them): class probabilities, the probability of 1, or values in the target's units
        (as ``test_predictions.npz``)."""
        if isinstance(batch, BaseData) and not isinstance(batch, Batch):
            batch = [batch]
        if isinstance(batch, (list, tuple)):
            batch = Batch.from_data_list(list(batch))
        placement = self.placement
        batch = to_device(batch, placement.device, placement.float_dtype)
        with placement.autocast():
            outputs = self.select(self.model(batch), batch)
        return {
            t.name: t.kind.prediction_values(t.predictions(outputs[t.name])).cpu()
            for t in self.tasks
        }


def run_files(run_dir: str | Path, checkpoint: str | Path | None) -> tuple[Path, Path]:
    """The run's ``config.yaml`` and its checkpoint (default ``checkpoints/best.pt``), both
    checked to exist; one line naming what is missing otherwise."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirectoryError(f"{run_dir}: no such run directory")
    config = run_dir / rd.CONFIG
    if not config.is_file():
        raise RunDirectoryError(
            f"{run_dir}: not a run directory (no {rd.CONFIG}; a run directory is what training "
            "writes to training.path)"
        )
    for entry in rd.read_environment(run_dir):  # modules beside the config it trained from
        for folder in entry.get("config_folders", []):
            config_folder(Path(folder), folder=True)
    if checkpoint is None:
        path = run_dir / rd.CHECKPOINTS / BEST
        if not path.is_file():
            saved = sorted(p.name for p in (run_dir / rd.CHECKPOINTS).glob("*.pt"))
            also = f" (it has {', '.join(saved)}; name one with --checkpoint)" if saved else ""
            raise CheckpointError(f"{path}: no such checkpoint; the run saved no best epoch{also}")
        return config, path
    if not Path(checkpoint).is_file():
        raise CheckpointError(f"checkpoint not found: {checkpoint}")
    return config, Path(checkpoint)


def load_model(
    run_dir: str | Path,
    checkpoint: str | Path | None = None,
    *,
    overrides: Iterable[str] = (),
    device: str | torch.device | None = None,
) -> LoadedModel:
    """The model of the run in ``run_dir`` with the weights of ``checkpoint`` (default
    ``checkpoints/best.pt``), in evaluation mode on ``device`` (default ``training.device``).

    ``overrides``: ``key=value`` changes to the run's config (``data.*`` for reading other
    data; the ``model`` section must still fit the weights).
    """
    config_path, checkpoint = run_files(run_dir, checkpoint)
    return model_from_checkpoint(load_config(config_path, overrides), checkpoint, device)


def model_from_checkpoint(
    config: Config, checkpoint: str | Path, device: str | torch.device | None = None
) -> LoadedModel:
    """``config``'s model with the evaluation weights of ``checkpoint`` (see :func:`load_model`)."""
    checkpoint = Path(checkpoint)
    state = load_checkpoint(checkpoint)
    device = select_device(config.training.device) if device is None else torch.device(device)
    spec = state.get("model_spec") or _spec_from_data(config)
    tasks = build_tasks(config, None, outputs=_outputs(spec, task_list(config), checkpoint))
    scaling = state.get("target_scaling") or {}
    tasks = [t.with_scaling(scaling.get(t.name)) for t in tasks]
    placement = Placement.of(device, config.training.precision)
    model = build_model(
        config.model,
        spec["in_channels"],
        {t.name: t.output_spec for t in tasks},
        graph_feature_channels=spec["graph_feature_channels"],
        edge_channels=spec.get("edge_channels", 0),
    )
    load_model_state(
        model,
        evaluation_weights(state),
        checkpoint,
        trained=state.get("config"),
        configured=config_to_dict(config),
    )
    model = model.to(placement.device, placement.float_dtype).eval()
    return LoadedModel(model, config, tasks, checkpoint, device, spec)


def _outputs(
    spec: Mapping[str, Any], tasks: Sequence[TaskConfig], checkpoint: Path
) -> dict[str, int]:
    outputs = dict(spec["outputs"])
    missing = [t.name for t in tasks if t.name not in outputs]
    if missing:
        raise CheckpointError(
            f"{checkpoint}: was trained without task(s) {', '.join(missing)} of the config "
            f"(it has {', '.join(outputs)})"
        )
    return outputs


def _spec_from_data(config: Config) -> dict[str, Any]:
    """What a checkpoint from before ``model_spec`` lacks, read from the config's dataset."""
    dataset = dataset_from_config(config.data)
    tasks = build_tasks(config, dataset)
    return {
        "in_channels": num_node_features(dataset),
        "outputs": {t.name: t.num_outputs for t in tasks},
        "graph_feature_channels": graph_feature_width(dataset, config.model.graph_features),
    }
