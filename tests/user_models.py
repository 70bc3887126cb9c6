"""Models a user might bring (``model.type: user_models.NAME``), and some broken ones."""

import torch
from torch import nn
from torch_geometric.nn import GCNConv, global_mean_pool


class SmallGCN(nn.Module):
    """Two GCN layers, mean pooling and one linear head per task; returns {task: tensor}."""

    def __init__(self, in_channels, outputs, hidden=16, dropout=0.1):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.heads = nn.ModuleDict({name: nn.Linear(hidden, n) for name, (n, _) in outputs.items()})

    def forward(self, batch):
        x = self.dropout(self.conv1(batch.x, batch.edge_index).relu())
        x = self.conv2(x, batch.edge_index).relu()
        pooled = global_mean_pool(x, batch.batch, batch.num_graphs)
        return {name: head(pooled) for name, head in self.heads.items()}


class MeanFeatures(nn.Module):
    """No message passing at all: a linear layer on the mean node features; returns a tensor."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        ((n, _),) = outputs.values()
        self.linear = nn.Linear(in_channels, n)

    def forward(self, batch):
        return self.linear(global_mean_pool(batch.x, batch.batch, batch.num_graphs))


class Unhurried(MeanFeatures):
    """MeanFeatures that takes 50 ms a batch without computing: a trial that runs for long
    while leaving the cores to the rest of the suite."""

    def forward(self, batch):
        import time

        time.sleep(0.05)
        return super().forward(batch)


class OneColumnTooMany(MeanFeatures):
    def __init__(self, in_channels, outputs):
        ((n, level),) = outputs.values()
        super().__init__(in_channels, {"y": (n + 1, level)})


class WrongTaskName(MeanFeatures):
    def forward(self, batch):
        return {"dimension": super().forward(batch)}


class NotAModel:
    def __init__(self, in_channels, outputs):
        pass


def constant(batch):
    return torch.zeros(batch.num_graphs, 3)


class PerTask(nn.Module):
    """A linear head per task: on the mean node features (graph tasks) or on each node."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        self.levels = {name: level for name, (_, level) in outputs.items()}
        self.heads = nn.ModuleDict(
            {name: nn.Linear(in_channels, n) for name, (n, _) in outputs.items()}
        )

    def forward(self, batch):
        pooled = global_mean_pool(batch.x, batch.batch, batch.num_graphs)
        return {
            name: head(pooled if self.levels[name] == "graph" else batch.x)
            for name, head in self.heads.items()
        }


class OneTensor(PerTask):
    def forward(self, batch):
        return next(iter(super().forward(batch).values()))


class MissingTime(PerTask):
    def forward(self, batch):
        out = super().forward(batch)
        del out["time"]
        return out


class TimePerGraph(PerTask):
    def forward(self, batch):
        pooled = global_mean_pool(batch.x, batch.batch, batch.num_graphs)
        return {name: head(pooled) for name, head in self.heads.items()}


class BreaksWhenTraining(MeanFeatures):
    """Answers in evaluation mode and fails in training mode: a crash in the middle of a run,
    after the first forward pass has passed its check."""

    def forward(self, batch):
        if self.training:
            raise RuntimeError("broke in the training pass")
        return super().forward(batch)


class FailsOnEveryBatch(MeanFeatures):
    def forward(self, batch):
        return self.linear(batch.x.t())  # the wrong way round: a shape error inside torch


class FailsOnRankOne(MeanFeatures):
    """Trains on rank 0 and fails in rank 1's first training pass: ranks that disagree."""

    def forward(self, batch):
        if self.training and torch.distributed.get_rank() == 1:
            raise RuntimeError("rank 1 cannot train")
        return super().forward(batch)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


class _CountsSteps(MeanFeatures):
    """Counts its training forward passes (not the check before training, which has no grad)."""

    steps = 0

    def training_step(self) -> int:
        if self.training and torch.is_grad_enabled():
            self.steps += 1
            return self.steps
        return 0


class DriftsOnRank1(_CountsSteps):
    """Changes its own bias outside the optimizer on rank 1, in its third training step."""

    def forward(self, batch):
        if self.training_step() == 3 and _rank() == 1:
            with torch.no_grad():
                self.linear.bias.add_(1.0)
        return super().forward(batch)


class NaNGradientOnRank1(_CountsSteps):
    """Its parameter ``scale`` gets a NaN gradient on rank 1 in the third training step; the
    loss and every other gradient stay finite."""

    def __init__(self, in_channels, outputs):
        super().__init__(in_channels, outputs)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, batch):
        scale = self.scale * 1.0
        if self.training_step() == 3 and _rank() == 1:
            scale.register_hook(lambda grad: grad * float("nan"))
        return super().forward(batch) * scale


class OutOfMemoryConv(nn.Module):
    """A ``model.conv`` that runs out of memory in its forward pass, as a batch too large for
    a GPU does."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.linear = nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


class Composed(nn.Module):
    """A model built from objects its config names, as configs of the predecessor built layers:
    ``conv`` an instance (``{class: ..., kwargs: ...}``), ``activation`` a class it
    instantiates itself (``{object: ...}``)."""

    def __init__(self, in_channels, outputs, conv, activation, hidden=16):
        super().__init__()
        self.encode = nn.Linear(in_channels, hidden)
        self.conv = conv
        self.act = activation()
        self.heads = nn.ModuleDict({t: nn.Linear(hidden, n) for t, (n, _) in outputs.items()})

    def forward(self, batch):
        x = self.act(self.encode(batch.x))
        x = self.act(self.conv(x, batch.edge_index))
        pooled = global_mean_pool(x, batch.batch, batch.num_graphs)
        return {task: head(pooled) for task, head in self.heads.items()}


class TinyVAE(nn.Module):
    """A variational graph autoencoder, trained as the predecessor's generative models are:
    per-node latents from a GCN, each link of the causal set decoded from the inner product of
    two latents. ``forward(batch)`` returns its own loss terms, one value per graph: ``nll``,
    the links' negative Bernoulli log-likelihood (a mean over the pairs of the graph), and
    ``kl``, the latents' KL divergence from the standard normal (a mean over its nodes). In
    evaluation the latents are their means: no random draw."""

    def __init__(self, in_channels, outputs, latent=4, hidden=16):
        super().__init__()
        self.conv = GCNConv(in_channels, hidden)
        self.mu = GCNConv(hidden, latent)
        self.logvar = GCNConv(hidden, latent)

    def forward(self, batch):
        from torch_geometric.utils import scatter, to_dense_adj, to_dense_batch

        h = self.conv(batch.x, batch.edge_index).relu()
        mu = self.mu(h, batch.edge_index)
        logvar = self.logvar(h, batch.edge_index).clamp(-8.0, 8.0)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if self.training else mu
        dense, mask = to_dense_batch(z, batch.batch, batch_size=batch.num_graphs)
        logits = dense @ dense.transpose(1, 2)
        links = to_dense_adj(
            batch.edge_index, batch.batch, max_num_nodes=dense.shape[1], batch_size=batch.num_graphs
        )
        pairs = (mask[:, :, None] & mask[:, None, :]).to(logits.dtype)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, links.to(logits.dtype), reduction="none"
        )
        nll = (bce * pairs).sum((1, 2)) / pairs.sum((1, 2))
        kl_nodes = -0.5 * (1 + logvar - mu**2 - logvar.exp()).sum(dim=1)
        kl = scatter(kl_nodes, batch.batch, dim=0, dim_size=batch.num_graphs, reduce="mean")
        return {"nll": nll, "kl": kl}


class LossOfOneNumber(TinyVAE):
    """Returns its terms summed over the batch: one number, not one per graph."""

    def forward(self, batch):
        terms = super().forward(batch)
        return {name: value.sum() for name, value in terms.items()}


class LossWithoutKL(TinyVAE):
    """Returns nll alone, while the config names nll and kl."""

    def forward(self, batch):
        return {"nll": super().forward(batch)["nll"]}


class PlainGNN(nn.Module):
    """A model written as PyTorch Geometric's examples are: forward(x, edge_index, batch)."""

    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv = GCNConv(in_channels, hidden_channels)
        self.out = nn.Linear(hidden_channels, out_channels)

    def forward(self, x, edge_index, batch):
        x = self.conv(x, edge_index).relu()
        return self.out(global_mean_pool(x, batch))


class PlainTwoHeads(PlainGNN):
    """As PlainGNN, returning two outputs: class logits and one value."""

    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__(in_channels, hidden_channels, out_channels)
        self.value = nn.Linear(hidden_channels, 1)

    def forward(self, x, edge_index, batch):
        pooled = global_mean_pool(self.conv(x, edge_index).relu(), batch)
        return self.out(pooled), self.value(pooled)


class PredecessorGNN(PlainGNN):
    """As the predecessor's models are written: the node features' width is ``in_features``."""

    def __init__(self, in_features, hidden_channels, out_channels):
        super().__init__(in_features, hidden_channels, out_channels)
