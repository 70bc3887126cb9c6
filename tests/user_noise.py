"""Models of one's own that do in evaluation what built-in models do not (``model.type:
user_noise.NAME``): draw random numbers, or give NaN."""

import torch
from torch import nn
from torch_geometric.nn import global_mean_pool


class SamplesInEval(nn.Module):
    """As a VAE that samples its latent in evaluation too: the mean node features, plus noise
    drawn from torch's default generator on every call, through a linear layer."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        ((n, _),) = outputs.values()
        self.linear = nn.Linear(in_channels, n)

    def forward(self, batch):
        pooled = global_mean_pool(batch.x, batch.batch, batch.num_graphs)
        return self.linear(pooled + torch.randn_like(pooled))


class NaNInEval(nn.Module):
    """Trains as a linear model on the mean node features; in evaluation every output is NaN,
    as a model that diverged gives."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        ((n, _),) = outputs.values()
        self.linear = nn.Linear(in_channels, n)

    def forward(self, batch):
        out = self.linear(global_mean_pool(batch.x, batch.batch, batch.num_graphs))
        return out if self.training else out * float("nan")
