"""The workflows that ship with bayesflow, run by name (``bayesflow run cold_posterior``).

They live in the top-level ``workflows/*.yaml`` of a checkout, which a wheel carries inside
the package (:mod:`bayesflow.shipped` finds either), so an installed wheel runs them as a
checkout does. A spec argument that names no existing file but a bundled workflow is that
workflow.
"""

from __future__ import annotations

import re
from pathlib import Path

from bayesflow.errors import SpecError
from bayesflow.registry import closest

__all__ = ["bundled_workflows", "describe", "resolve_spec_path"]


def bundled_workflows() -> dict[str, Path]:
    """Every bundled workflow by name (its file name without ``.yaml``)."""
    from bayesflow.shipped import shipped_folder

    folder = shipped_folder("workflows")
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def describe(path: Path) -> str:
    """The first sentence of a workflow's ``description`` (its question)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return ""
    text = str(data.get("description") or "").strip() if isinstance(data, dict) else ""
    text = " ".join(text.split())
    match = re.search(r"[.?!](\s|$)", text)
    return text[: match.end()].strip() if match else text


def resolve_spec_path(source: str | Path) -> Path:
    """``source`` itself when it exists (or looks like a path), else the bundled workflow of
    that name.

    Raises:
        SpecError: a bare name that is neither a file here nor a bundled workflow.
    """
    path = Path(source)
    if path.exists() or path.suffix or len(path.parts) > 1:
        return path
    bundled = bundled_workflows()
    if str(source) in bundled:
        return bundled[str(source)]
    hint = closest(str(source), list(bundled))
    suggestion = f"; did you mean {hint!r}?" if hint else ""
    raise SpecError(
        f"no spec file {str(source)!r} here and no bundled workflow of that name{suggestion} "
        f"(bundled: {', '.join(bundled)}; `bayesflow workflows` lists them)"
    )
