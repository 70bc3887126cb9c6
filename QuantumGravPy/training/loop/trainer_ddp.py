"""TrainerDDP: the base Trainer's loop, run by every process of a DistributedDataParallel job.

Its cross-process acts are the parallel layer's
(:class:`~QuantumGravPy.parallel.processes.ProcessGroup`: rank-0 work, barriers, broadcasts,
gathers and sums); what is its own is what a DDP job does differently:

- the model is wrapped in DDP with integer ``device_ids`` (``cuda:LOCAL_RANK``) or none on CPU,
  and the optimizer built, by the ``parallel.strategy`` (:mod:`~QuantumGravPy.parallel.strategies`);
- the training sampler (the base class's) is split between ranks, reshuffled by ``set_epoch``;
- micro-batches that do not step skip the gradient exchange (``no_sync``);
- training losses are all-reduced as sums; validation and test are exact for any world size,
  either on rank 0 alone (``validation.mode: rank0``) or on disjoint shards (``sharded``);
- rank 0 decides (early stopping, best checkpoint, a study's pruning) after a barrier and
  broadcasts the decision (``on_main``), so every rank stops at the same epoch and returns the
  same history;
- anything that runs on rank 0 alone is guarded: if it fails, the other ranks are told and fail
  too, instead of waiting at the next collective.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
from torch.utils.data import Dataset, Subset
from torch_geometric.loader import DataLoader

from ...config import Config
from ...data import SHARED_BUILD_MIN, check_file_targets, dataset_from_config, epoch_sampler
from ...data.sources.digest import check_same_on_every_rank, digest
from ...errors import ConfigError
from ...logs import LOGGER_NAME, waiting
from ...parallel import distributed, sharing, shm_comm
from ...parallel.distributed import DistributedError
from ...parallel.processes import ProcessGroup
from ...parallel.strategies import Strategy
from ...runs.reproducibility import seed_everything
from .trainer import Trainer


class TrainerDDP(Trainer):
    """One process of a distributed run. Needs a process group (:func:`qg.initialize_ddp`).

    ``TrainerDDP(rank, config)`` with ``rank`` the global rank. ``training.batch_size`` is per
    process; the global batch is ``batch_size * world_size`` (or ``training.global_batch_size``,
    split between the processes). Only rank 0 writes files and shows
    progress bars; ``run_training`` returns the same history on every rank.
    """

    processes_class = ProcessGroup  # rank-0 work, barriers, broadcasts and gathers

    def __init__(
        self,
        rank: int,
        config: Config,
        dataset: Dataset | list | None = None,
        *,
        overwrite: bool = False,
        resume: bool = False,
        force: bool = False,
        **options: Any,
    ):
        """``options``: the base class's keyword options (``judge``, ``tags``, ``quiet``,
        ``profiling``); a judge is asked on rank 0 only."""
        if not distributed.is_initialized():
            raise DistributedError(
                "TrainerDDP needs a process group: call qg.initialize_ddp(rank, world_size) "
                "first, or start the job with qg.launch(config)"
            )
        if rank != distributed.get_rank():
            raise DistributedError(
                f"TrainerDDP was given rank {rank}, but this process is rank "
                f"{distributed.get_rank()} of its process group"
            )
        self.log_prefix = f"[RANK {rank}] "
        self.rank_logger = logging.getLogger(f"{LOGGER_NAME}.ranks")
        self.rank_logger.setLevel(logging.INFO)  # start and end lines show on every rank
        super().__init__(
            config, dataset, overwrite=overwrite, resume=resume, force=force, **options
        )
        # Every rank has built the same initial model from training.seed, the one a single
        # process builds; DDP broadcasts rank 0's copy anyway. From here on, each rank draws its
        # own dropout masks.
        seed_everything(config.training.seed + rank)
        self.gradient_sync = "nccl" if self.device.type == "cuda" else "gloo"
        self._shm: shm_comm.SharedMemoryAllReduce | None = None
        hook = distributed.allreduce_hook  # what DDP does without a hook
        params = [p for p in self.model.parameters() if p.requires_grad]
        sharing = config.parallel.shared_memory and self.strategy.comm_hook  # fsdp: its own
        if sharing and shm_comm.supported(self.device, params):
            self._shm = shm_comm.SharedMemoryAllReduce(
                sum(p.numel() for p in params), timeout_s=distributed.get_timeout_s()
            )
            hook = self._shm.hook
            self.gradient_sync = "shared memory"
        # timed, and each rank's own gradients checked before they are averaged
        self.ddp_model: torch.nn.Module | None = self.strategy.wrap(
            self.model,
            find_unused_parameters=config.parallel.find_unused_parameters,
            hook=self.monitor.wrap_hook(hook),
            timer=self.monitor,  # exchanges outside DDP's hook: fsdp's, invariant's
        )

    # --- who does what -------------------------------------------------------------------------

    local_rank = property(lambda self: self.processes.local_rank, doc="Rank on this machine.")

    @property
    def train_module(self) -> torch.nn.Module:
        if self.ddp_model is None:
            raise DistributedError("this TrainerDDP was closed; build a new one to train again")
        return self.ddp_model

    def no_sync(self):
        return self.strategy.no_sync(self.train_module)

    def make_strategy(self) -> Strategy:
        # fsdp with bf16 / 16 gathers and computes in bfloat16 / float16 weights
        return self.strategy_class.from_config(
            self.config, self.device, compute_dtype=self.autocast_dtype
        )

    @property
    def eval_shard(self) -> tuple[int, int]:
        # sharded: each rank evaluates graphs rank, rank + W, ... (make_eval_loader)
        sharded = self.config.validation.mode == "sharded"
        return (self.rank, self.world_size) if sharded else (0, 1)

    @property
    def eval_model(self) -> torch.nn.Module:
        # fsdp: a plain copy gathered from the shards (every rank gets here at the same point)
        return self.strategy.evaluation_module(super().eval_model, step=self.global_step)

    def select_device(self) -> torch.device:
        spec = self.config.training.device
        if spec.startswith("cuda:") and self.world_size > 1:
            raise ConfigError(
                f"training.device: {spec!r} would put every process on one GPU; use 'cuda' or "
                "'auto' (each process takes cuda:LOCAL_RANK)"
            )
        nccl = distributed.backend() == "nccl"
        if spec == "cpu" and nccl:
            raise ConfigError("training.device: cpu needs parallel.backend gloo, found nccl")
        if nccl or (spec in ("cuda", "auto") and torch.cuda.is_available()):
            if self.local_rank >= torch.cuda.device_count():
                raise ConfigError(
                    f"training.device: local rank {self.local_rank} needs cuda:{self.local_rank} "
                    f"but {torch.cuda.device_count()} GPU(s) are visible"
                )
            return torch.device("cuda", self.local_rank)
        if spec.startswith("cuda"):
            raise ConfigError(f"training.device: {spec!r} requested but CUDA is not available")
        return torch.device("cpu")

    # --- data ----------------------------------------------------------------------------------

    def load_dataset(self) -> Dataset | list:
        check_file_targets(self.config.data, self.config.tasks)  # before the files are read
        if self.config.data.dataset is not None:
            # the user's function runs in every rank (a failure in one reaches every rank),
            # and its graphs must be the same in each
            dataset = self.processes.everywhere(super().load_dataset, patient=True)
            mine = self.processes.everywhere(lambda: digest(dataset))
            source = f"data.dataset ({self.config.data.dataset})"
            check_same_on_every_rank(
                dataset, mine, source=source, gather=distributed.all_gather_object
            )
            return dataset
        # One process builds a missing cache, with as many processes as the job has on its
        # machine when the work pays for starting them: rank 0 when every rank sees its
        # data.root (one file system), else the first of each machine. The others wait as
        # long as that takes (not parallel.timeout_s), saying so, then read it.
        shared = sharing.everyone_sees(self.config.data.root)
        builds = self.rank == 0 if shared else self.local_rank == 0
        local = distributed.get_local_world_size()
        builder = "rank 0" if shared else "the first rank of this machine"
        with (
            contextlib.nullcontext()
            if builds
            else waiting(self.rank_logger, f"{builder} to prepare the data")
        ):
            dataset = self.processes.everywhere(
                lambda: dataset_from_config(
                    self.config.data,
                    progress=self.is_main,
                    world_size=local,
                    processes=local,
                    min_per_process=SHARED_BUILD_MIN,
                ),
                run_here=builds,
                patient=True,
            )
        if builds:
            return dataset
        return dataset_from_config(self.config.data, progress=False, processes=local)

    def make_eval_loader(self, dataset: Dataset, batch_size: int) -> DataLoader:
        if self.config.validation.mode == "sharded":
            # Disjoint and unpadded: every graph is evaluated exactly once over all ranks (a
            # DistributedSampler would pad with repeats and bias the metrics).
            dataset = Subset(dataset, range(self.rank, len(dataset), self.world_size))
        return super().make_eval_loader(dataset, batch_size)

    # --- the loop's hooks ----------------------------------------------------------------------

    def on_train_start(self, train_loader: DataLoader) -> None:
        sampler = epoch_sampler(train_loader)
        plan = getattr(train_loader.batch_sampler, "plan", None)  # training.batch_nodes
        mine = sum(len(b[self.rank]) for b in plan()) if plan else len(sampler)
        self.rank_logger.info(
            "started: rank %d of %d, local rank %d, device %s, %d of %d training graphs "
            "(%d batches) per epoch",
            self.rank,
            self.world_size,
            self.local_rank,
            self.device,
            mine,
            len(train_loader.dataset),
            len(train_loader),
        )
        super().on_train_start(train_loader)
        t = self.config.training
        self.logger.info(
            "global batch %s = %s per process x %d processes; strategy %s, gradients "
            "averaged via %s; validation mode %s",
            f"{t.batch_size * self.world_size}" if plan is None else "of varying graphs",
            f"{t.batch_size}" if plan is None else f"at most {t.batch_nodes} nodes",
            self.world_size,
            self.strategy.name,
            self.gradient_sync,
            self.config.validation.mode,
        )

    def on_epoch_start(self, train_loader: DataLoader) -> None:
        super().on_epoch_start(train_loader)
        self.strategy.release()  # what the last evaluation gathered

    def on_train_end(self) -> None:
        self.rank_logger.info(
            "finished: %d epochs%s",
            self.epoch,
            ", stopped early" if self.stopped_early else ", pruned" if self.pruned else "",
        )

    def close(self) -> None:
        """Detach the log file and release the DDP wrapper and its gradient exchange.

        Evaluation (``run_test``) still works afterwards; training does not.
        """
        super().close()
        self.compiling.release()  # a compiled DDP wrapper holds the reducer too
        self.ddp_model = None  # its reducer goes now, while the process group still exists
        if self._shm is not None:
            self._shm.close()
            self._shm = None
