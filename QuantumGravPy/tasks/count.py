"""``count``: a whole number of 0 or more, learnt as the log of its expected value (a Poisson
head); every prediction is that expected value, never below 0. A regression otherwise: its
table and picture are a regression's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DataError
from .base import Values
from .regression import Regression

if TYPE_CHECKING:
    from torch import Tensor

_OWN = {"sync_on_compute": False}
# The log-rates a prediction is made of are read between -LOG_RATE_LIMIT and LOG_RATE_LIMIT,
# in float64: e^50 (about 5e21) is past any count of a causal set, yet far from overflowing,
# and e^-50 (about 2e-22) is 0 for every purpose, yet positive, as the Poisson deviance needs.
LOG_RATE_LIMIT = 50.0
_POISSON = "torch.nn.PoissonNLLLoss"


class Count(Regression):
    """A whole number of 0 or more per graph, node or pair (the elements in an interval, say).
    The model's output is the log of the expected count, learnt with the Poisson negative
    log-likelihood. A prediction is its exponential, so it is never below 0."""

    name = "count"
    metrics = ("mae", "rmse", "mse", "poisson_deviance", "r2", "max_error")
    default_metrics = ("mae", "poisson_deviance")
    minimized = ("mae", "rmse", "mse", "poisson_deviance", "max_error")
    default_loss = _POISSON  # log_input=True: it takes the log-rates
    standardizes = False  # a count is learnt as it is
    picture = "counts.png"

    def check(self, task: Any, key: str) -> None:
        super().check(task, key)
        if task.loss_name == _POISSON and task.loss_kwargs.get("log_input") is False:
            raise ConfigError(
                f"{key}.loss_kwargs.log_input: a count task's outputs are log-rates, so its "
                f"Poisson loss takes them as logs; task {task.name!r} has log_input: false"
            )

    def check_target(self, value: Tensor, task: Any, key: str) -> None:
        super().check_target(value, task, key)
        _check_counts(value, task, key)

    def count_outputs(
        self, task: Any, first: Tensor, values: Values, known: int | None, key: str, outputs: str
    ) -> int:
        found = values()
        if found is not None:
            _check_counts(found, task, key)
        return super().count_outputs(task, first, values, known, key, outputs)

    def loss_target(self, target: Tensor, outputs: Tensor) -> Tensor:
        return target.reshape(outputs.shape).to(outputs.dtype)

    def rate(self, outputs: Tensor) -> Tensor:
        """The expected counts of the model's ``outputs`` (log-rates), in float64: each
        log-rate is read within :data:`LOG_RATE_LIMIT` of 0, then exponentiated."""
        return outputs.double().clamp(-LOG_RATE_LIMIT, LOG_RATE_LIMIT).exp()

    def make_metric(self, name: str, num_outputs: int) -> Any:
        if name == "poisson_deviance":  # the mean over every row and output
            from torchmetrics.regression import TweedieDevianceScore

            return TweedieDevianceScore(power=1.0, **_OWN)
        return super().make_metric(name, num_outputs)

    def metric_inputs(self, outputs: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        return super().metric_inputs(self.rate(outputs), target)

    def prediction_values(self, predicted: Tensor) -> Tensor:
        return self.rate(predicted)  # the expected count


def _check_counts(values: Tensor, task: Any, key: str) -> None:
    """A DataError naming ``key`` unless every one of ``values`` is a whole number of 0 or
    more."""
    good = values >= 0
    if values.is_floating_point():  # NaN and infinities are no whole numbers
        good &= values.isfinite() & (values == values.round())
    if not bool(good.all()):
        bad = values[~good][0].item()
        raise DataError(
            f"{key}: the count task {task.name!r} needs whole numbers of 0 or more in "
            f"{task.target_name!r}, found {bad}"
        )
