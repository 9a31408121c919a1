"""Where the workflows and report templates that ship with bayesflow are found.

In git they live in the top-level folders of the design card's layout, ``workflows/``
(the YAML specs) and ``templates/`` (the report notebooks), beside the package. A wheel
carries the same files inside the package, as ``bayesflow/workflows`` and
``bayesflow/templates`` (``setup.py`` maps them), so an installed ``bayesflow run
cold_posterior`` works from any folder. This module is the one place that knows both.
"""

from __future__ import annotations

from pathlib import Path

from bayesflow.errors import BayesflowError

__all__ = ["shipped_folder"]

PACKAGE = Path(__file__).resolve().parent

# What each shipped folder holds: a folder without such files (a stale __pycache__ left by
# an older checkout, say) is not taken for it.
CONTENTS = {"workflows": "*.yaml", "templates": "*.py"}


def shipped_folder(name: str) -> Path:
    """The folder of the shipped ``workflows`` or ``templates``: inside the installed package
    (a wheel), else beside it (a checkout or an editable install).

    Raises:
        BayesflowError: neither place holds them (a broken install).
    """
    pattern = CONTENTS[name]
    for folder in (PACKAGE / name, PACKAGE.parent / name):
        if folder.is_dir() and any(folder.glob(pattern)):
            return folder
    raise BayesflowError(
        f"the shipped {name} are missing: neither {PACKAGE / name} nor {PACKAGE.parent / name} "
        f"holds {pattern} files; reinstall with `pip install --force-reinstall bayesflow-workflows`"
    )
