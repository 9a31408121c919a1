"""Networks a spec can name. Each builder takes the input and output sizes first.

===========  ==================================================  =====================
name         network                                             module
===========  ==================================================  =====================
mlp          multi-layer perceptron                              :mod:`.dense`
linear       linear map (regression)                             :mod:`.dense`
logistic     linear map to logits                                :mod:`.dense`
cnn          conv-ReLU-pool blocks and a linear head (images)    :mod:`.images`
cnn_lstm     embedding, conv, pool, LSTM, linear (token ids)     :mod:`.text`
python       your own module from ``package.module:factory``     :mod:`.python`
double_well  a fixed 2-D log density (``energy``, ``none``)      :mod:`.energy`
===========  ==================================================  =====================

``python`` runs your code: see :mod:`bayesflow.models.python`. Every network is used
through ``torch.func.functional_call`` on a flat parameter vector (:mod:`bayesflow.problem`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from bayesflow.models.dense import linear, logistic, mlp
from bayesflow.models.energy import double_well
from bayesflow.models.images import cnn
from bayesflow.models.python import load_factory, python_model
from bayesflow.models.registry import MODELS
from bayesflow.models.text import LSTM, cnn_lstm

__all__ = [
    "LSTM",
    "MODELS",
    "build_model",
    "cnn",
    "cnn_lstm",
    "double_well",
    "linear",
    "load_factory",
    "logistic",
    "mlp",
    "python_model",
]


def build_model(config: dict[str, Any], num_features: int, num_outputs: int) -> nn.Module:
    """Build the model a spec's ``model`` section describes."""
    options = dict(config)
    return MODELS.get(options.pop("name"))(num_features, num_outputs, **options)
