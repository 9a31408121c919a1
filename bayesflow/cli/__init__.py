"""The command line: ``bayesflow validate | plan | run | report | ui | schema``,
``bayesflow lm-eval RUN --tasks T`` (a language-model posterior on lm-eval tasks) and the
registry listings ``bayesflow engines | models | datasets | likelihoods | priors | plots``
(``bayesflow models list | pull NAME``: pretrained models).

The commands hold no logic: they call :mod:`bayesflow.api` and :mod:`bayesflow.spec.catalog`.
Each group of commands is a module that registers itself on :data:`bayesflow.cli.app.app`.
"""

from __future__ import annotations

import sys

# isort: off
# Importing a command module registers its commands; this order is the order of `--help`.
from bayesflow.cli import plan, run, store, harness, listings, pretrained  # noqa: F401
# isort: on
from bayesflow.cli.app import app

__all__ = ["app", "main", "tolerate_unencodable_output"]


def tolerate_unencodable_output() -> None:
    """Print what the terminal cannot encode as ``\\u2192``-style escapes instead of failing.

    Under ``LANG=C`` or ``PYTHONIOENCODING=ascii`` standard output is strict ASCII, and a
    ``θ``, ``±`` or ``→`` (in a path, a message, the summary) would raise
    ``UnicodeEncodeError`` after the work is done; standard error already escapes them.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # absent on a replaced stream
        if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
            reconfigure(errors="backslashreplace")


def main() -> None:
    """Entry point of the ``bayesflow`` script (``--debug`` is accepted anywhere)."""
    tolerate_unencodable_output()
    arguments = sys.argv[1:]
    if "--debug" in arguments[1:] and "--" not in arguments[: arguments.index("--debug")]:
        arguments.remove("--debug")
        arguments.insert(0, "--debug")
    app(args=arguments, prog_name="bayesflow")
