"""The typed artefacts stages return, and their round trip through the stage cache.

A stage writes its files into the staging folder it is given and returns one artefact;
the artefact's :meth:`values` are the small JSON values the cache keeps beside the files
(``outputs.json``). :func:`read` rebuilds the artefact of a finished stage from its cache
:class:`~bayesflow.dag.cache.Entry`, its file paths then pointing into the entry's folder.
The values keep the names stages wrote before artefacts were typed, so entries cached by
earlier versions are read back unchanged.

=====================  ====================  ==========================================
artefact               stage kind            files
=====================  ====================  ==========================================
FitArtefact            fit                   ``posterior.npz``
FitGroupArtefact       fit_group             ``posterior-<i>.npz`` per cell
CurvatureArtefact      curvature             ``curvature.npz``
EvaluationArtefact     evaluate              ``evaluation.npz`` (when it has arrays)
PriorPredictiveArtefact prior_predictive     ``prior_predictive.npz``
PlotArtefact           plot                  ``<plot>.png``
ReportArtefact         report                ``report.ipynb``, ``report.html``, ``bundle/``
=====================  ====================  ==========================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Entry

__all__ = [
    "CURVATURE_FILE",
    "EVALUATION_FILE",
    "POSTERIOR_FILE",
    "PRIOR_PREDICTIVE_FILE",
    "SUMMARY_DIAGNOSTICS",
    "Artefact",
    "CurvatureArtefact",
    "EvaluationArtefact",
    "FitArtefact",
    "FitGroupArtefact",
    "PlotArtefact",
    "PriorPredictiveArtefact",
    "ReportArtefact",
    "kind_of",
    "read",
    "read_inputs",
]

POSTERIOR_FILE = "posterior.npz"
EVALUATION_FILE = "evaluation.npz"
PRIOR_PREDICTIVE_FILE = "prior_predictive.npz"
CURVATURE_FILE = "curvature.npz"
NOTEBOOK_FILE = "report.ipynb"
HTML_FILE = "report.html"
BUNDLE_FOLDER = "bundle"
# The sampler diagnostics a fit logs as metrics; the rest (per tensor, bands) go to its
# diagnostics table (FitArtefact.diagnostics_table).
SUMMARY_DIAGNOSTICS = frozenset({
    "kinetic_temperature", "kinetic_temperature_ratio", "kinetic_temperature_fraction_inside",
    "configurational_temperature", "configurational_temperature_ratio",
    "rhat/log_posterior", "ess/log_posterior",
    "nested_rhat/log_posterior", "nested_rhat_max",
})


def _json_number(value: float | None) -> float | None:
    """``value``, or None (JSON null) for a missing or non-finite one."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class FitArtefact:
    """A fitted posterior (``posterior.npz``, see docs/design.md, "Contracts") and how the fit went.

    Attributes:
        posterior: the posterior file.
        fit_seconds: wall time of the fit (a vectorised cell's share of its group's).
        steps: update steps.
        history: the training loss per epoch.
        traces: other per-epoch series (``kinetic_temperature_ratio``, ``step_size``, a
            continual fit's ``episode_nll/<i>``, ...).
        diagnostics: sampler diagnostics of the final state.
        vectorized: fitted as one cell of a ``fit_group``.
        shared_curvature_seconds: for a Laplace fit rescaled from a shared curvature
            pass, that pass's time.
        evidence: a Laplace fit's ``log_evidence`` and, for an evidence-chosen prior,
            ``log_evidence_spec_prior``, ``prior_variance_chosen``, ``noise_sd_chosen``
            (:mod:`bayesflow.engines.evidence`); logged as metrics.
    """

    posterior: Path
    fit_seconds: float
    steps: int
    history: list[float] = field(default_factory=list)
    traces: dict[str, list[float]] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)
    vectorized: bool = False
    shared_curvature_seconds: float | None = None
    evidence: dict[str, float] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        """The cache's JSON values."""
        values: dict[str, Any] = {
            "fit_seconds": self.fit_seconds, "steps": self.steps, "history": self.history,
            "traces": self.traces, "diagnostics": self.diagnostics,
        }
        if self.vectorized:
            values["vectorized"] = True
        if self.shared_curvature_seconds is not None:
            values["shared_curvature_seconds"] = self.shared_curvature_seconds
        if self.evidence:
            values["evidence"] = self.evidence
        return values

    def metrics(self) -> dict[str, float]:
        """The summary metrics of the fit: ``fit_seconds``, ``steps``, the summary
        diagnostics (:data:`SUMMARY_DIAGNOSTICS`; the others are in
        :meth:`diagnostics_table`) and a Laplace fit's ``evidence``."""
        summaries = {key: value for key, value in self.diagnostics.items() if key in SUMMARY_DIAGNOSTICS}
        return {"fit_seconds": self.fit_seconds, "steps": float(self.steps), **summaries, **self.evidence}

    def diagnostics_table(self) -> dict[str, Any]:
        """Every diagnostic as one table, in the form of ``mlflow.log_table``'s JSON:
        ``{"columns": ["name", <quantity>, ...], "data": [[name, value or None, ...]]}``.

        Row ``all`` holds the numbers of the whole fit (``kinetic_temperature_ratio``,
        its band, ...); a diagnostic named ``<quantity>/<name>`` (a parameter tensor's
        ``kinetic_temperature/0.weight``, a summary's ``rhat/theta_0``) is the value of
        column ``<quantity>`` in row ``<name>``. Empty (no rows) without diagnostics.
        """
        rows: dict[str, dict[str, float]] = {}
        quantities: dict[str, None] = {}
        for key, value in self.diagnostics.items():
            quantity, _, name = key.partition("/")
            rows.setdefault(name or "all", {})[quantity] = value
            quantities[quantity] = None
        if "all" in rows:
            rows = {"all": rows.pop("all"), **rows}
        columns = list(quantities)
        data = [
            [name, *(_json_number(row.get(column)) for column in columns)] for name, row in rows.items()
        ]
        return {"columns": ["name", *columns] if data else [], "data": data}

    def series(self) -> dict[str, list[float]]:
        """The per-epoch series under their MLflow names: ``train_loss`` (the history)
        and ``trace/<name>`` (each trace)."""
        found = {"train_loss": self.history} if self.history else {}
        found.update({f"trace/{name}": values for name, values in self.traces.items()})
        return found

    @classmethod
    def from_entry(cls, entry: Entry) -> FitArtefact:
        """The artefact of a finished fit stage."""
        values = entry.values
        return cls(
            entry.file(POSTERIOR_FILE), float(values["fit_seconds"]), int(values["steps"]),
            list(values.get("history", [])), dict(values.get("traces", {})),
            dict(values.get("diagnostics", {})), bool(values.get("vectorized", False)),
            values.get("shared_curvature_seconds"), dict(values.get("evidence", {})),
        )


@dataclass(frozen=True)
class FitGroupArtefact:
    """A vectorised grid fitted as one engine run: one posterior and fit record per cell.

    Attributes:
        cells: the cells' fit stage names, in the order of ``posteriors`` and ``fits``.
        posteriors: ``posterior-<i>.npz`` of cell i.
        fits: each cell's :meth:`FitArtefact.values` (without its posterior).
        group_seconds: wall time of the whole group.
    """

    cells: list[str]
    posteriors: list[Path]
    fits: list[dict[str, Any]]
    group_seconds: float

    def values(self) -> dict[str, Any]:
        """The cache's JSON values."""
        return {"cells": self.cells, "fits": self.fits, "group_seconds": self.group_seconds}

    @classmethod
    def from_entry(cls, entry: Entry) -> FitGroupArtefact:
        """The artefact of a finished ``fit_group`` stage."""
        cells = list(entry.values["cells"])
        posteriors = [entry.file(f"posterior-{index}.npz") for index in range(len(cells))]
        return cls(cells, posteriors, list(entry.values["fits"]), float(entry.values["group_seconds"]))


@dataclass(frozen=True)
class CurvatureArtefact:
    """One Laplace curvature pass at a shared mode (``curvature.npz``: ``params``, ``curvature``)."""

    file: Path
    fit_seconds: float
    steps: int
    history: list[float] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        """The cache's JSON values."""
        return {"kind": "curvature", "fit_seconds": self.fit_seconds, "steps": self.steps,
                "history": self.history}

    @classmethod
    def from_entry(cls, entry: Entry) -> CurvatureArtefact:
        """The artefact of a finished curvature stage."""
        values = entry.values
        return cls(entry.file(CURVATURE_FILE), float(values["fit_seconds"]), int(values["steps"]),
                   list(values.get("history", [])))


@dataclass(frozen=True)
class EvaluationArtefact:
    """A posterior's metrics on held-out data, what each means, and per-point arrays.

    Attributes:
        metrics: ``test_nll``, ``test_accuracy``, ... (``docs/metrics.md``).
        conventions: one line per metric saying how it was computed.
        file: ``evaluation.npz`` (per-point probabilities, uncertainties), or None when
            the evaluation has no arrays (an energy without data).
    """

    metrics: dict[str, float]
    conventions: dict[str, str] = field(default_factory=dict)
    file: Path | None = None

    def values(self) -> dict[str, Any]:
        """The cache's JSON values."""
        return {"metrics": self.metrics, "conventions": self.conventions}

    @classmethod
    def from_entry(cls, entry: Entry) -> EvaluationArtefact:
        """The artefact of a finished evaluate stage."""
        file = entry.file(EVALUATION_FILE)
        return cls(dict(entry.values["metrics"]), dict(entry.values.get("conventions", {})),
                   file if file.exists() else None)


@dataclass(frozen=True)
class PriorPredictiveArtefact:
    """The prior predictive check: summary metrics and per-draw arrays."""

    metrics: dict[str, float]
    file: Path

    def values(self) -> dict[str, Any]:
        """The cache's JSON values."""
        return {"metrics": self.metrics}

    @classmethod
    def from_entry(cls, entry: Entry) -> PriorPredictiveArtefact:
        """The artefact of a finished prior predictive stage."""
        return cls(dict(entry.values["metrics"]), entry.file(PRIOR_PREDICTIVE_FILE))


@dataclass(frozen=True)
class PlotArtefact:
    """One figure of the spec's ``plots``, as a PNG."""

    png: Path

    def values(self) -> dict[str, Any]:
        """The cache's JSON values (the file's name within the entry)."""
        return {"figure": self.png.name}

    @classmethod
    def from_entry(cls, entry: Entry) -> PlotArtefact:
        """The artefact of a finished plot stage."""
        return cls(entry.file(Path(entry.values["figure"]).name))


@dataclass(frozen=True)
class ReportArtefact:
    """The executed report notebook, its self-contained HTML, and the bundle it read."""

    notebook: Path
    html: Path
    bundle: Path

    def values(self) -> dict[str, Any]:
        """The cache's JSON values (the files' names within the entry)."""
        return {"notebook": self.notebook.name, "html": self.html.name, "bundle": self.bundle.name}

    @classmethod
    def from_entry(cls, entry: Entry) -> ReportArtefact:
        """The artefact of a finished report stage."""
        values = entry.values
        return cls(
            entry.file(Path(values["notebook"]).name), entry.file(Path(values["html"]).name),
            entry.file(values.get("bundle", BUNDLE_FOLDER)),
        )


Artefact = (
    FitArtefact | FitGroupArtefact | CurvatureArtefact | EvaluationArtefact
    | PriorPredictiveArtefact | PlotArtefact | ReportArtefact
)

_BY_KIND: dict[str, Any] = {
    "fit": FitArtefact,
    "fit_group": FitGroupArtefact,
    "curvature": CurvatureArtefact,
    "evaluate": EvaluationArtefact,
    "prior_predictive": PriorPredictiveArtefact,
    "plot": PlotArtefact,
    "report": ReportArtefact,
}


def kind_of(stage_name: str) -> str:
    """The kind of a stage from its name (the planner names stages ``<kind>/...``)."""
    return stage_name.split("/", 1)[0]


def read(kind: str, entry: Entry) -> Artefact:
    """The artefact of a finished stage of ``kind`` from its cache entry."""
    try:
        artefact_type = _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"no artefact type for stage kind {kind!r}; expected one of {sorted(_BY_KIND)}") from None
    return artefact_type.from_entry(entry)  # type: ignore[no-any-return]


def read_inputs(inputs: dict[str, Entry]) -> dict[str, Artefact]:
    """Every input entry of a stage as its artefact, by stage name."""
    return {name: read(kind_of(name), entry) for name, entry in inputs.items()}
