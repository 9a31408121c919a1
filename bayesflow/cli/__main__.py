"""``python -m bayesflow.cli``."""

from __future__ import annotations

from bayesflow.cli import main

main()
