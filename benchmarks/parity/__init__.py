"""The peer-parity study: do bayesflow and posteriors, fitted alike, predict alike?

``python -m benchmarks.parity.run`` (:mod:`.run`) answers it, seed by seed, into
docs/parity.md; ``python -m benchmarks.parity.noise`` (:mod:`.noise`) asks where a gap comes
from (the random draws or the code). :mod:`.problem` is the problem and each seed's draws,
:mod:`.fits` bayesflow's fits, :mod:`.peer` posteriors' fits, :mod:`.stats` the paired
gaps and :mod:`.report` the results file and the doc's block. Results go to
``benchmarks/results/parity/`` and ``benchmarks/results/parity-noise/``.
"""
