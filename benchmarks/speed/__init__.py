"""The speed suite ``make bench`` runs: ``python -m benchmarks.speed.run`` (:mod:`.run`).

Each case answers one question about bayesflow's speed or memory against posteriors, a
peer library, and a hand-written floor (:mod:`.floor`), run side by side in one process
or in fresh ones: :mod:`.pima` (per step on Pima, and K chains, :mod:`.chains`),
:mod:`.digits` (per epoch on the digits MLP), :mod:`.grids` (temperature grids and the
paper's parallel SGHMC), :mod:`.workflow` (the default workflow end to end), :mod:`.kfac`
(KFAC Laplace against laplace-torch) and :mod:`.llm` (a language model's trainable
subsets). :mod:`.report` and :mod:`.tables` write the tables into docs/benchmarks.md;
the results go to ``benchmarks/results/speed/``.
"""
