"""One-off studies, each one question and one entry point (docs/benchmarks.md lists them):
:mod:`.cold_chains`, :mod:`.linearized`, :mod:`.noop`, :mod:`.profile`, :mod:`.ray_transfer`."""
