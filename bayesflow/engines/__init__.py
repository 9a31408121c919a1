"""The torch machinery of the inference methods.

The methods themselves (their spec classes, traits and ``build`` functions) are declared in
:mod:`bayesflow.methods`; this package holds the pure engines they build and what several
share: :mod:`base` (the problem, posterior and engine types and the linearised
predictive), :mod:`fit` (the loop that drives an engine over minibatches),
:mod:`curvature` (GGN, Fisher and Hessian), :mod:`sgmcmc` (chains, step sizes, noise and
collection of every SG-MCMC sampler) and :mod:`optimize` (torchopt optimisers).
See ``docs/design.md``.
"""
