"""Laplace approximations around a mode (``from:`` a MAP or MLE method).

The curvature at the mode does not depend on the temperature (a Laplace posterior at T
is the same curvature rescaled), so every temperature of a seed shares one curvature
pass; how a method predicts (``prediction``) does not change it either.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from bayesflow.methods.base import PREDICTION_DESCRIPTION, Method, MethodBase, Prediction, Traits

__all__ = ["METHODS", "LaplaceBase", "LaplaceSpec", "LaplaceDiagFisherSpec", "LaplaceDenseFisherSpec", "LaplaceDenseGGNSpec", "LaplaceDenseHessianSpec"]


class LaplaceBase(MethodBase):
    """Fields shared by the Laplace approximations."""

    batch_size: PositiveInt | None = Field(
        256, description="Minibatch size of the curvature pass; null for full batch."
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class LaplaceSpec(LaplaceBase):
    """Diagonal Laplace with the generalised Gauss-Newton curvature, around `from`."""

    engine: Literal["laplace_diag_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDiagFisherSpec(LaplaceBase):
    """Diagonal Laplace with the empirical Fisher curvature, around `from`."""

    engine: Literal["laplace_diag_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseFisherSpec(LaplaceBase):
    """Dense Laplace with the empirical Fisher curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseGGNSpec(LaplaceBase):
    """Dense Laplace with the generalised Gauss-Newton curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDenseHessianSpec(LaplaceBase):
    """Dense Laplace with the exact Hessian, around `from` (small models)."""

    engine: Literal["laplace_dense_hessian"] = Field(description="Registry name of the engine.")


def _laplace(name: str, spec: type[LaplaceBase], module: str) -> Method:
    traits = Traits(needs_mode=True, curvature=name.removeprefix("laplace_"), posterior="gaussian")
    return Method(name, spec, traits, f"bayesflow.engines.{module}:build")


METHODS = (
    _laplace("laplace_diag_ggn", LaplaceSpec, "laplace"),
    _laplace("laplace_diag_fisher", LaplaceDiagFisherSpec, "laplace_diag_fisher"),
    _laplace("laplace_dense_fisher", LaplaceDenseFisherSpec, "laplace_dense_fisher"),
    _laplace("laplace_dense_ggn", LaplaceDenseGGNSpec, "laplace_dense_ggn"),
    _laplace("laplace_dense_hessian", LaplaceDenseHessianSpec, "laplace_dense_hessian"),
)
