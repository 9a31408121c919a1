"""Variational inference with a Gaussian family: diagonal (``vi_diag``) or dense (``vi_dense``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from bayesflow.methods.base import (
    PREDICTION_DESCRIPTION,
    Method,
    MethodBase,
    OptimizerSpec,
    Prediction,
    Traits,
)

__all__ = ["METHODS", "VIBase", "VISpec", "VIDenseSpec"]


class VIBase(MethodBase):
    """Fields shared by the variational methods."""

    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    n_samples: PositiveInt = Field(
        1, description="Monte Carlo samples of the ELBO's expectation per step."
    )
    init_log_sd: float = Field(
        -3.0, description="Initial log standard deviation of every parameter."
    )
    stick_the_landing: bool = Field(
        True, description="Drop the score term of the entropy gradient (Roeder et al., 2017)."
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class VISpec(VIBase):
    """Variational inference with a diagonal Gaussian (``vi_diag``)."""

    engine: Literal["vi_diag"] = Field(description="Registry name of the engine.")


class VIDenseSpec(VIBase):
    """Variational inference with a full-covariance Gaussian (``vi_dense``, small models)."""

    engine: Literal["vi_dense"] = Field(description="Registry name of the engine.")


METHODS = (
    Method("vi_diag", VISpec, Traits(posterior="gaussian"), "bayesflow.engines.vi:build"),
    Method("vi_dense", VIDenseSpec, Traits(posterior="gaussian"), "bayesflow.engines.vi_dense:build"),
)
