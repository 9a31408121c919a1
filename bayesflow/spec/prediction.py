"""The names of the predictives of a Gaussian posterior: a Laplace, VI, EKF or conjugate
method's ``prediction`` and ``evaluate.prediction``.

``closed_form`` was called ``linearized_probit`` until the regression predictive it also
names showed that the name said only half of what it computes. Specs that spell it the
old way still validate, to ``closed_form`` (:func:`current_name`), and the planner hashes
the closed form under its former name (:func:`former_name`), so those specs keep their
cache keys.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

__all__ = ["CLOSED_FORM", "FORMER_NAMES", "PREDICTIONS", "PREDICTION_DESCRIPTION", "Prediction",
           "current_name", "former_name"]

CLOSED_FORM = "closed_form"
FORMER_NAMES = {"linearized_probit": CLOSED_FORM}
"""Former names of predictives, each read as the name it maps to."""

PREDICTIONS: tuple[str, ...] = ("sampled", "linearized", CLOSED_FORM, "linearized_mc")
"""How a posterior predicts: through the network with sampled parameters, through the
network linearised around the mean (Immer et al., 2021) with sampled parameters, from the
linearised network's output law in closed form, or with outputs sampled from that law."""


def current_name(value: Any) -> Any:
    """``value`` with a former predictive name replaced by its current one."""
    return FORMER_NAMES.get(value, value) if isinstance(value, str) else value


def former_name(value: Any) -> Any:
    """The name a cache key spells ``value`` with: the closed form under its former
    name ``linearized_probit``, every other value as it is."""
    return next((old for old, new in FORMER_NAMES.items() if new == value), value)


Prediction = Annotated[
    Literal["sampled", "linearized", "closed_form", "linearized_mc"],
    BeforeValidator(
        current_name,
        json_schema_input_type=Literal["sampled", "linearized", "closed_form", "linearized_mc",
                                       "linearized_probit"],
    ),
]
"""A predictive's name; its former names validate to the current one."""

PREDICTION_DESCRIPTION = (
    "How the evaluate stage forms the predictive: `sampled` pushes parameter samples "
    "through the network; `linearized` also samples: it draws `evaluate.n_samples` "
    "parameter samples and pushes them through the network linearised around the mean "
    "(the GLM predictive of Immer et al., 2021), a Monte Carlo estimate, not a closed "
    "form. The other two use the linearised network's outputs, N(f(x, mean), J Sigma J^T) "
    "per test point, computed in chunks of test points within the memory budget "
    "(BAYESFLOW_MEMORY_LIMIT): `closed_form` predicts without samples, for classification "
    "by the probit approximation softmax(f / sqrt(1 + pi/8 diag(J Sigma J^T))) (no "
    "per-sample probabilities: no `_single` metrics, only the total uncertainty) and for a "
    "Gaussian likelihood by the exact N(f, J Sigma J^T + noise_sd^2) (laplace-torch's "
    "`pred_type='glm'` with `link_approx='probit'`, and its closed-form regression "
    "predictive); `linearized_mc` draws `evaluate.n_samples` outputs from that Gaussian "
    "(Monte Carlo over the outputs; the law of `linearized`, without a network pass per "
    "sample). `linearized_probit` is the former name of `closed_form`, still accepted "
    "and read as `closed_form` (with the same cache keys)."
)
