"""The torch machinery that several inference methods share.

The methods themselves (each family's spec class, traits, state and ``build``) live in
:mod:`bayesflow.methods`, one module per family; this package holds what several of them
share: :mod:`base` (the problem, posterior and engine types, the linearised predictive
and the dense-matrix checks), :mod:`fit` (the loop that drives an engine over
minibatches), :mod:`curvature` (GGN, Fisher and Hessian), :mod:`sgmcmc` (chains, step
sizes, noise and collection of every SG-MCMC sampler) and :mod:`optimize` (torchopt
optimisers and schedules). See ``docs/design.md``.
"""
