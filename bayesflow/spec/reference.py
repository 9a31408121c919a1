"""Generate the spec reference (``docs/spec.md``) from the pydantic models.

``bayesflow schema --markdown -o docs/spec.md`` writes it; a test fails when the committed
file and the models disagree, so the documentation cannot drift from what validates.
"""

from __future__ import annotations

from dataclasses import replace

from bayesflow.spec.catalog import KINDS, Parameter, entries, parameters, plot_entries, summary
from bayesflow.spec.models import WorkflowSpec

__all__ = ["markdown_reference"]

HEADER = """\
# Workflow spec reference

<!-- Generated from bayesflow/spec/models.py and methods.py by
     `bayesflow schema --markdown -o docs/spec.md`; do not edit by hand
     (tests/spec/test_reference.py fails when this file and the models disagree). -->

A workflow spec is one YAML mapping. Keys are written as dotted paths: `evaluate.n_samples`
is `n_samples` inside `evaluate`. Unknown keys are errors. `bayesflow validate --resolved
SPEC` prints a spec with every default filled in; `bayesflow schema` writes the same
information as a JSON Schema for editors.
"""

TITLES = {
    "datasets": "Datasets",
    "models": "Models",
    "likelihoods": "Likelihoods",
    "priors": "Priors",
    "engines": "Inference methods (engines)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Parameter]) -> list[str]:
    lines = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for row in rows:
        default = row.default if row.default == "required" else f"`{row.default}`"
        lines.append(
            f"| `{row.key}` | {_cell(row.type)} | {_cell(default)} | {_cell(row.description)} |"
        )
    return lines


def _section(kind: str) -> list[str]:
    _, tag, key = KINDS[kind]
    lines = [
        f"## {TITLES[kind]}: `{key}`",
        "",
        f"Chosen by `{key}.{tag}`; each takes the keys listed under it.",
        "",
    ]
    for entry in entries(kind):
        names = ", ".join(f"`{name}`" for name in entry.names)
        lines += [f"### {names}", "", summary(entry.model, whole=True), ""]
        if entry.parameters:
            lines += [*_table(list(entry.parameters)), ""]
        if entry.model.model_config.get("extra") == "allow":
            lines += ["Any other key is accepted and passed on, as described above.", ""]
        if not entry.parameters:
            lines += [f"No keys besides `{tag}`.", ""]
    return lines


def _top_level() -> list[Parameter]:
    """The top-level keys; a section chosen by name points to its own table below."""
    sections = {key.split(".")[0]: kind for kind, (_, _, key) in KINDS.items()}
    rows = []
    for row in parameters(WorkflowSpec):
        if row.key in sections:
            row = replace(row, type=f"{row.type} (see {TITLES[sections[row.key]]} below)")
        elif row.key == "plots":
            row = replace(row, type="list of plot names (see Plots below)")
        rows.append(row)
    return rows


def markdown_reference() -> str:
    """The whole spec reference as Markdown."""
    lines = [HEADER, "## Top level", "", summary(WorkflowSpec, whole=True), ""]
    lines += [*_table(_top_level()), ""]
    for kind in KINDS:
        lines += _section(kind)
    lines += [
        "## Plots: `plots`",
        "",
        "A list of figure names drawn in the report.",
        "",
        "| plot | draws |",
        "| --- | --- |",
        *(f"| `{name}` | {_cell(what)} |" for name, what in plot_entries()),
        "",
    ]
    return "\n".join(lines).rstrip("\n") + "\n"
