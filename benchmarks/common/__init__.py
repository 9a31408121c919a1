"""What every group of benchmarks shares: :mod:`.timing` (the clock), :mod:`.problems` (the
Pima and digits problems both libraries see), :mod:`.peers` (the posteriors side of a
comparison) and :mod:`.provenance` (where, when and on what a run ran)."""
