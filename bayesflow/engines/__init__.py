"""The inference engine registry: a spec's ``engine:`` value → ``build``.

Every builder has the signature ``build(problem, tempering, config) -> Engine`` where
``config`` is the method's pydantic spec model (:mod:`bayesflow.spec.methods`). One
module per engine (the dense Laplace and EKF variants each have their own), plus the
machinery several share:

==========================  ===============================================================
module                      engines
==========================  ===============================================================
:mod:`optimize`             ``map``, ``mle``
:mod:`deep_ensemble`        ``deep_ensemble``
:mod:`laplace`              ``laplace_diag_ggn`` (and the recipe of every Laplace engine)
:mod:`laplace_diag_fisher`  ``laplace_diag_fisher``
:mod:`laplace_dense_*`      ``laplace_dense_fisher``, ``_ggn``, ``_hessian`` (one module each)
:mod:`vi`, :mod:`vi_dense`  ``vi_diag``, ``vi_dense``
:mod:`ekf_diag_fisher`      ``ekf_diag_fisher`` (:mod:`ekf_dense_fisher`: ``ekf_dense_fisher``)
:mod:`sgld` … :mod:`baoa`   ``sgld``, ``sghmc``, ``sgnht``, ``baoa`` (shared: :mod:`sgmcmc`)
:mod:`nuts`                 ``nuts`` (pyro, an optional extra, imported when built)
==========================  ===============================================================

:mod:`curvature` computes the GGN, Fisher and Hessian matrices; :mod:`base` holds the
problem, posterior and engine types and the linearised predictive; :mod:`fit` drives them.
"""

from __future__ import annotations

from typing import Any

from bayesflow.registry import Registry

__all__ = ["ENGINES"]

ENGINES: Registry[Any] = Registry("engine")

# Importing the modules registers their engines.
from bayesflow.engines import (  # noqa: F401
    baoa,
    deep_ensemble,
    ekf_dense_fisher,
    ekf_diag_fisher,
    laplace,
    laplace_dense_fisher,
    laplace_dense_ggn,
    laplace_dense_hessian,
    laplace_diag_fisher,
    nuts,
    optimize,
    sghmc,
    sgld,
    sgnht,
    vi,
    vi_dense,
)
