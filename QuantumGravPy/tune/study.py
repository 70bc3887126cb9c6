"""A study: N trials of a search space, K at a time, each an ordinary run in its own processes.

This process alone asks the study for trials and tells it their results (Optuna's ask-and-tell
interface); a trial's rank 0 only reports its epochs and reads the pruner's answer. So trials
are counted in one place: the study ends with exactly N trials that finished (completed,
pruned or failed on their own account), whatever was killed on the way.

A trial whose job died (SIGKILL, preemption, a lost node) stays "running" in the storage. Each
running trial names its owner (host, process id and that process's start time) and carries a
heartbeat the owner renews; ``--resume`` marks a trial failed, as interrupted, when its owner
on this machine is gone or its heartbeat is older than ``stale_after_s`` (``--stale-after``,
5 minutes unless told), and puts its parameters back in the queue, so it is run again under a
new number and the total stays N.

Several jobs may work on one study at once (the job array of docs/tuning.md). Counting and
asking are two steps in a shared storage, so two jobs can both ask for the last trial; trial
numbers are given out one at a time, so the trial whose number comes after N counted ones is the
surplus: it is failed at once, marked ``surplus``, and counted nowhere.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from .. import logs
from ..compat.optuna import trial_id as storage_id
from ..config import Config, config_to_dict
from ..data import dataset_from_config
from ..errors import ConfigError, QGError, flag, option
from ..logs import add_file_handler, configure_logging, get_logger
from ..parallel import spawn
from ..parallel.distributed import available_cores
from ..parallel.spawn import resolve_backend
from ..runs import layout as rd
from .abandoned import (
    HEARTBEAT,
    OWNER,
    STALE_AFTER_S,
    fail_abandoned,
    heartbeat,
    interrupt,
    owner,
)
from .results import SURPLUS, counted, write_outputs
from .space import SearchSpace, trial_config
from .storage import JOURNAL, open_storage, redact
from .trial import TrialLink, trial_worker

LOG = "tune.log"
REDRAW_S = 30.0  # the study's pictures are redrawn after a trial at most this often


class Tuner:
    """A study run to ``trials`` trials (:meth:`run` returns the Optuna study)."""

    def __init__(
        self,
        base: Config,
        space: SearchSpace,
        *,
        trials: int,
        parallel: int = 1,
        storage: str | None = None,
        study_name: str | None = None,
        resume: bool = False,
        stale_after_s: float = STALE_AFTER_S,
    ):
        for name, value in ((option("trials"), trials), (option("parallel"), parallel)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected a positive number, found {value!r}")
        if not stale_after_s > 0:
            raise ConfigError(
                f"{option('stale-after', 'stale_after_s')}: expected a positive number, "
                f"found {stale_after_s}"
            )
        if space.sampler["type"] == "grid" and trials > space.grid_points():
            sizes = " x ".join(str(len(p.grid())) for p in space.params)
            raise ConfigError(
                f"{option('trials')}: {trials} trials, but the grid has {space.grid_points()} "
                f"combinations ({sizes}), each tried once; give {space.grid_points()} or fewer"
            )
        self.stale_after_s = float(stale_after_s)
        self.base, self.space, self.total, self.parallel = base, space, trials, parallel
        self.dir = base.run_dir
        self.name = study_name or base.name
        if any((self.dir / name).exists() for name in (rd.CONFIG, rd.CHECKPOINTS)):
            raise ConfigError(
                f"training.path: {self.dir} holds a training run, not a study; give the study "
                "a folder of its own (training.path=...)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.storage_spec = storage or str(self.dir / JOURNAL)
        self.storage = open_storage(self.storage_spec)
        self.owner = owner()
        self.study = self._open_study(resume)
        self.study.set_user_attr("directory", str(self.dir.absolute()))
        self.lock = threading.Lock()  # asking, telling and the output files
        self.drawn_at = -math.inf  # when the pictures were last drawn (time.monotonic())
        self.running: dict[int, Any] = {}  # trial id -> trial, of this process
        self.stopping = False

    # --- the study in its storage ---------------------------------------------------------------

    def _open_study(self, resume: bool) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = self.space.make_sampler(parallel=self.parallel)
        pruner = self.space.make_pruner()
        shown = redact(self.storage_spec)
        names = [s.study_name for s in optuna.get_all_study_summaries(self.storage)]
        if self.name not in names:
            leftovers = sorted(self.dir.glob("trial_[0-9]*"))
            if leftovers:
                raise ConfigError(
                    f"training.path: {self.dir} holds trial folders ({leftovers[0].name}, ...) "
                    f"of a study that {shown} does not have; move them, or give another "
                    "training.path"
                )
            try:
                return optuna.create_study(
                    study_name=self.name,
                    storage=self.storage,
                    sampler=sampler,
                    pruner=pruner,
                    direction=self.space.direction,
                )
            except optuna.exceptions.DuplicatedStudyError:
                pass  # another job created it a moment ago: continue it, as a later job would
        # a seeded sampler would suggest again what the study's first job suggested
        sampler = self.space.make_sampler(parallel=self.parallel, salt=self.owner)
        study = optuna.load_study(
            study_name=self.name, storage=self.storage, sampler=sampler, pruner=pruner
        )
        if study.trials and not resume:
            raise ConfigError(
                f"study {self.name!r} in {shown} already has {len(study.trials)} trials: "
                f"continue it with {flag('resume')}, or give another {option('study')} or "
                "training.path"
            )
        if study.direction.name.lower() != self.space.direction:
            raise ConfigError(
                f"objective.direction: study {self.name!r} was created to "
                f"{study.direction.name.lower()}, found {self.space.direction!r}"
            )
        return study

    def _surplus(self, trial: Any) -> bool:
        """Whether N counted trials came before ``trial`` (asked for by another job at the same
        moment); such a trial is failed at once, marked ``surplus``, and counts nowhere."""
        from optuna.trial import TrialState

        before = self.study.get_trials(deepcopy=False)
        if sum(counted(t) for t in before if t.number < trial.number) < self.total:
            return False
        self.storage.set_trial_user_attr(storage_id(trial), SURPLUS, True)
        self.storage.set_trial_state_values(storage_id(trial), TrialState.FAIL)
        return True

    def _finished(self) -> int:
        """Trials that count towards the total, this process's running ones included."""
        return sum(counted(t) for t in self.study.get_trials(deepcopy=False))

    # --- running ------------------------------------------------------------------------------

    def run(self) -> Any:
        logger = configure_logging(self.base.log_level)
        handler = add_file_handler(self.dir / LOG)
        try:
            rerun = fail_abandoned(self.study, self.storage, self.stale_after_s)
            if rerun:
                logger.info(
                    "trial(s) %s were left running by a job that ended: failed, to run again",
                    ", ".join(map(str, rerun)),
                )
            done = self._finished()
            logger.info(
                "study %r in %s: %d of %d trials done, %d at a time, %s %s",
                self.name,
                redact(self.storage_spec),
                done,
                self.total,
                self.parallel,
                self.space.direction,
                self.space.metric,
            )
            if self.base.data.dataset is None and done < self.total:
                dataset_from_config(self.base.data)  # built once, not by every trial at once
            # A bar on a terminal; in a file (a SLURM log), a line every 30 s between the
            # trials' own lines.
            self.bar = logs.progress(
                total=self.total, initial=min(done, self.total), desc="trials", unit="trial"
            )
            try:
                with self.bar, heartbeat(self.storage, self.running, self.stale_after_s):
                    self._run_slots()
            finally:  # also when stopped: the files show what the study holds
                with self.lock:
                    write_outputs(self.study, self.space, self.dir, final=True)
            self._log_best(logger)
        finally:
            logger.removeHandler(handler)
            handler.close()
        return self.study

    def _run_slots(self) -> None:
        if self.parallel == 1:
            while self._one_trial():
                pass
            return
        errors: list[BaseException] = []
        # Each slot says itself when it is done. Not Thread.join: a Ctrl-C that interrupts
        # join() can mark a thread that is still running as stopped (Python 3.11's
        # Thread._wait_for_tstate_lock), and the study then wrote its files, and ended, before
        # that slot had recorded its trial as interrupted.
        done = [threading.Event() for _ in range(self.parallel)]

        def slot(finished: threading.Event) -> None:
            try:
                while not self.stopping and self._one_trial():
                    pass
            except BaseException as e:  # re-raised in the main thread
                errors.append(e)
                self.stopping = True
            finally:
                finished.set()

        def wait_for_slots() -> None:
            for finished in done:
                while not finished.wait(0.5):
                    pass

        for i, finished in enumerate(done):
            name = f"trial slot {i}"
            threading.Thread(target=slot, args=(finished,), name=name, daemon=True).start()
        try:
            wait_for_slots()
        except KeyboardInterrupt:
            # Ctrl-C reached every process of the group: the trials end, their slots record
            # them as interrupted, and the study can be resumed. Every slot is waited for,
            # through further interrupts too, so the files written next see all of them.
            self.stopping = True
            while not all(finished.is_set() for finished in done):
                with contextlib.suppress(KeyboardInterrupt):
                    wait_for_slots()
            raise
        if errors:
            raise errors[0]

    def _one_trial(self) -> bool:
        """Ask for a trial, run it and tell its result; False when the study is complete."""
        with self.lock:
            if self.stopping:
                return False
            # a job that died meanwhile (another worker of a cluster study) frees its trial
            fail_abandoned(self.study, self.storage, self.stale_after_s)
            if self._finished() >= self.total:
                return False
            trial = self.study.ask()
            trial_id = storage_id(trial)
            if self._surplus(trial):
                return False
            self.storage.set_trial_system_attr(trial_id, OWNER, self.owner)
            self.storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())
            self.running[trial_id] = trial
            values = self.space.suggest(trial)
        run_dir = self.dir / f"trial_{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir))
        try:
            state, value, attrs = self._train(trial, values, run_dir)
        except BaseException as e:  # Ctrl-C, or a failure of the study itself: run it again
            why = "Ctrl-C" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}"
            interrupt(self.study, self.storage, trial, f"interrupted: the study stopped ({why})")
            raise
        finally:
            self.running.pop(trial_id, None)
        for key, attr in attrs.items():
            trial.set_user_attr(key, attr)
        with self.lock:
            self.study.tell(trial, value, state=state)
            self._log_trial(trial.number, state, value, attrs, values)
            self.bar.update(1)
            # the pictures at most every REDRAW_S (a drawing takes about a second, a long
            # trial minutes); the table and the best config after every trial
            draw = time.monotonic() - self.drawn_at >= REDRAW_S
            write_outputs(self.study, self.space, self.dir, plots=draw)
            self.drawn_at = time.monotonic() if draw else self.drawn_at
        return True

    def _train(self, trial: Any, values: dict[str, Any], run_dir: Path):
        """(state, value, user attributes) of one trial."""
        from optuna.trial import TrialState

        try:
            config = trial_config(self.base, values, run_dir)
        except ConfigError as e:
            return TrialState.FAIL, None, {"error": f"impossible config: {e}"}
        trial.set_user_attr("config", config_to_dict(config))
        link = TrialLink(self.storage_spec, self.name, storage_id(trial), trial.number, self.space)
        world_size = config.parallel.world_size
        threads = max(1, available_cores() // (self.parallel * world_size))
        try:
            results = spawn(
                trial_worker,
                world_size,
                config,
                link,
                threads,
                master_addr=config.parallel.master_addr,  # a free port for each trial
                backend=resolve_backend(config.parallel, config.training.device),
                timeout_s=config.parallel.timeout_s,
                start_method="forkserver",
            )
        except QGError as e:
            if self.stopping:
                raise KeyboardInterrupt from None  # its processes ended with the study's
            return TrialState.FAIL, None, {"error": str(e)}
        result = results[0]
        history = result["history"]
        if any(len(r["history"]) != len(history) for r in results):  # the broadcast failed
            ends = [len(r["history"]) for r in results]
            return TrialState.FAIL, None, {"error": f"the ranks stopped at epochs {ends}"}
        attrs = {"epochs": len(history)}
        if result["pruned"]:
            return TrialState.PRUNED, None, attrs
        value = self.space.best([float(row[self.space.metric]) for row in history])
        if value != value:  # NaN in every epoch
            return TrialState.FAIL, None, {**attrs, "error": f"{self.space.metric} was NaN"}
        return TrialState.COMPLETE, value, attrs

    # --- the log --------------------------------------------------------------------------------

    def _log_trial(self, number, state, value, attrs, values) -> None:
        shown = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
        )
        if state.name == "COMPLETE":
            what = f"{self.space.metric} {value:.4f} in {attrs['epochs']} epochs"
        elif state.name == "PRUNED":
            what = f"pruned after epoch {attrs['epochs']}"
        else:
            what = f"failed: {attrs.get('error')}"
        get_logger().info("trial %d (%s): %s", number, shown, what)

    def _log_best(self, logger) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                best = self.study.best_trial
            except ValueError:
                logger.warning("no trial of study %r completed", self.name)
                return
        logger.info(
            "best: trial %d, %s %.4f; its config: %s",
            best.number,
            self.space.metric,
            best.value,
            self.dir / "best.yaml",
        )
