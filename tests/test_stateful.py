"""A checkpoint is a dict of the run's stateful parts by name: a part added in one place
(``parts.checkpoints``) is saved each epoch and loaded back on resume, and a checkpoint written
before the part existed still loads."""

import torch

import QuantumGravPy as qg
from QuantumGravPy.training.loop import parts


class Counter:
    """A part that keeps state: the epochs it has seen, and what it was last loaded from."""

    def __init__(self):
        self.seen, self.loaded = 0, "never"

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.loaded = state
        self.seen = 0 if state is None else state["seen"]


class Counting(qg.Listener):
    def __init__(self, counter):
        self.counter = counter

    def on_epoch_end(self, trainer, row):
        self.counter.seen += 1


def with_counter(monkeypatch, counter):
    """``parts.checkpoints`` with one more part, as a new part of the library would be added."""
    built = parts.checkpoints

    def checkpoints(t):
        made = built(t)
        made.parts["counter"] = counter
        return made

    monkeypatch.setattr(parts, "checkpoints", checkpoints)


def run(config, counter, *, resume=False):
    trainer = qg.Trainer(config, resume=resume)
    trainer.listeners.items.insert(0, Counting(counter))  # counted before the records
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train_loader, val_loader)
    trainer.close()
    return trainer, history


def test_a_part_added_in_one_place_is_saved_and_resumed(make_config, monkeypatch):
    counter = Counter()
    with_counter(monkeypatch, counter)
    trainer, _ = run(make_config("training.num_epochs=2"), counter)
    last = qg.load_checkpoint(trainer.run_dir / "checkpoints" / "last.pt")
    assert last["counter"] == {"seen": 2}
    assert last["epoch"] == 2  # the run's progress stays at the top level, where readers look

    again = Counter()
    with_counter(monkeypatch, again)
    resumed, history = run(make_config("training.num_epochs=3"), again, resume=True)
    assert again.loaded == {"seen": 2}  # loaded back when the trainer was built
    assert again.seen == 3 and len(history) == 3
    assert resumed.resumed_from == trainer.run_dir / "checkpoints" / "last.pt"


def test_a_checkpoint_from_before_a_part_existed_still_loads(make_config, monkeypatch):
    run(make_config("training.num_epochs=1"), Counter())  # no such part then
    counter = Counter()
    with_counter(monkeypatch, counter)
    _, history = run(make_config("training.num_epochs=2"), counter, resume=True)
    assert counter.loaded is None  # nothing under its name: it keeps its start
    assert counter.seen == 1 and len(history) == 2


def test_each_part_of_a_checkpoint_is_under_its_name(make_config):
    """The file's keys are the parts' names (plus the progress and what the run was trained
    from): the format every earlier version wrote."""
    trainer, _ = run(make_config("training.num_epochs=1"), Counter())
    last = qg.load_checkpoint(trainer.run_dir / "checkpoints" / "last.pt")
    named = {"model", "optimizer", "ema", "lr_scheduler", "scaler", "early_stopping"}
    progress = {"epoch", "global_step", "history", "rng", "best_model", "stopped_early"}
    about = {"model_spec", "config", "config_digest", "world_size", "environment"}
    assert named | progress | about | {"target_scaling", "sampler_epoch"} <= set(last)
    model = trainer.model.state_dict()
    assert all(torch.equal(last["model"][k], v) for k, v in model.items())
