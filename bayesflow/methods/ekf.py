"""Extended Kalman filters: one Bayesian update per minibatch, diagonal or dense.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

from bayesflow.methods.base import PREDICTION_DESCRIPTION, Method, MethodBase, Prediction, Traits

__all__ = ["METHODS", "EKFBase", "EKFDiagSpec", "EKFDenseSpec"]


class EKFBase(MethodBase):
    """Fields shared by the extended Kalman filters."""

    epochs: PositiveInt = Field(
        1, description="Passes over the training data (one pass is one Bayesian update)."
    )
    batch_size: PositiveInt | None = Field(
        128, description="Minibatch size of each filter step; null for full batch."
    )
    fisher: Literal["expected", "empirical"] = Field(
        "expected",
        description="Curvature of each update: `expected` is the Fisher of the model's "
        "predictive (Ollivier, 2018; exact Kalman filtering for a linear-Gaussian model); "
        "`empirical` is Σᵢ gᵢgᵢᵀ of the per-example gradients (as the posteriors library).",
    )
    decay: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Predict step: the covariance is divided by `decay` before each update "
        "(fading memory); 1 keeps the exact Bayesian update.",
    )
    transition_variance: float = Field(
        0.0,
        ge=0,
        description="Predict step: variance q added to every parameter before each update.",
    )
    init_variance: PositiveFloat | None = Field(
        None,
        description="Initial (untempered) variance of every parameter; null uses the prior's "
        "variance, the filter's starting belief.",
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class EKFDiagSpec(EKFBase):
    """Online extended Kalman filter with a diagonal covariance (``ekf_diag_fisher``)."""

    engine: Literal["ekf_diag_fisher"] = Field(description="Registry name of the engine.")


class EKFDenseSpec(EKFBase):
    """Online extended Kalman filter with a dense covariance (small models)."""

    engine: Literal["ekf_dense_fisher"] = Field(description="Registry name of the engine.")


METHODS = (
    Method(
        "ekf_diag_fisher", EKFDiagSpec, Traits(posterior="gaussian"),
        "bayesflow.engines.ekf_diag_fisher:build",
    ),
    Method(
        "ekf_dense_fisher", EKFDenseSpec, Traits(posterior="gaussian"),
        "bayesflow.engines.ekf_dense_fisher:build",
    ),
)
