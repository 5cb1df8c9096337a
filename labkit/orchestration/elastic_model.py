"""What the elastic job trains, the same on every rank and at every world size: a small model, the
global batch of each step, the rows each rank takes from it, and the loss one process reaches.

Every step takes one fixed global batch whatever the world size, and each rank takes every
W-th row of it with its loss scaled by W / batch, so DDP's average of the ranks' gradients is
the gradient of the whole batch's mean: the world size changes the speed, not the result.
"""

from __future__ import annotations

import torch

from labkit.orchestration.elastic import ElasticConfig


def make_model(cfg: ElasticConfig) -> torch.nn.Module:
    torch.manual_seed(cfg.seed)
    return torch.nn.Sequential(torch.nn.Linear(cfg.dim, cfg.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(cfg.hidden, 1))


def global_batch(cfg: ElasticConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch, the same on every rank and at every world size."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    x = torch.randn(cfg.global_batch, cfg.dim, generator=gen)
    teacher = torch.Generator().manual_seed(cfg.seed + 7)
    w = torch.randn(cfg.dim, 1, generator=teacher)
    return x, torch.sin(x @ w) + 0.1 * x[:, :1] ** 2


def rank_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world: int
               ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Rank ``rank``'s rows of a global batch (every ``world``-th one) and its loss scale
    ``world / batch``: summed squared errors times the scale, averaged over the ranks by DDP, are
    the whole batch's mean squared error, at any world size."""
    return x[rank::world], y[rank::world], world / x.shape[0]


def reference_loss(cfg: ElasticConfig) -> float:
    """The loss of step ``cfg.steps`` trained here in one process: what the elastic job reaches
    whatever its world sizes, since every step takes the same global batch (up to the order of
    float sums in the all-reduce)."""
    model = make_model(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loss = torch.tensor(float("nan"))
    for step in range(cfg.steps):
        x, y = global_batch(cfg, step)
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.item()
