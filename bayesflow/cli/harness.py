"""``bayesflow lm-eval RUN --tasks T``: a fitted language-model posterior scored on
lm-evaluation-harness tasks (:mod:`bayesflow.posterior.harness`), lm-eval's table and
bayesflow's calibration of the multiple-choice tasks printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from bayesflow.cli.app import TRACKING_URI_OPTION, app, console, guarded, output, print_table

__all__ = ["lm_eval_command"]

INCLUDE_PATH_OPTION = typer.Option(
    None, "--include-path", help="A folder of task YAML files (searched before lm-eval's own tasks).",
)
OUTPUT_OPTION = typer.Option(
    None, "--output", help="Write lm-eval's results and bayesflow's calibration (JSON) to this file.",
)


@app.command("lm-eval")
@guarded
def lm_eval_command(
    run: str = typer.Argument(
        ..., metavar="RUN", show_default=False,
        help="A fit run id (`bayesflow results`), or a folder holding a fit's posterior.npz and spec.",
    ),
    tasks: str = typer.Option(
        ..., "--tasks", show_default=False,
        help="Comma-separated lm-eval task names (or task YAML paths).",
    ),
    include_path: Path | None = INCLUDE_PATH_OPTION,
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most N documents per task."),
    members: int | None = typer.Option(
        None, "--members", min=1, help="Posterior members drawn (default: the run's evaluate.n_samples).",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seeds the members' draw (default: the evaluate stage's)."),
    bins: int = typer.Option(10, "--bins", min=1, help="Equal-width bins of the ECE."),
    device: str = typer.Option("cpu", "--device", help="Where the model runs (cpu, cuda)."),
    output_file: Path | None = OUTPUT_OPTION,
    tracking_uri: str | None = TRACKING_URI_OPTION,
) -> None:
    """Score a language-model posterior on lm-eval tasks: lm-eval's metrics, and the ECE,
    NLL and Brier of each multiple-choice task's choice probabilities (the `lmeval` extra)."""
    from bayesflow.posterior.harness import PosteriorLM
    from bayesflow.posterior.harness_tasks import evaluate_tasks, load_task_manager, offline

    names = [name.strip() for name in tasks.split(",") if name.strip()]
    if not names:
        console.print("[bold red]error:[/] --tasks names no task", highlight=False)
        raise typer.Exit(2)
    with offline():  # the tasks checked before the model is built: a bad task fails in seconds
        manager = load_task_manager(names, include_path)
    model = PosteriorLM(run, members=members, seed=seed, tracking_uri=tracking_uri, device=device)
    evaluation = evaluate_tasks(model, names, limit=limit, bins=bins, task_manager=manager)
    from lm_eval.utils import make_table

    output.print(make_table(evaluation.results), markup=False, highlight=False)
    if evaluation.calibration:
        print_table(_calibration_table(evaluation.calibration, bins, int(model.members.shape[0])))
    for task, reason in evaluation.skipped.items():
        console.print(f"{task}: no calibration ({reason})", markup=False, highlight=False)
    if output_file is not None:
        output_file.parent.mkdir(parents=True, exist_ok=True)
        output_file.write_text(_json(evaluation))
        console.print(f"wrote {output_file}", markup=False, highlight=False)


def _calibration_table(calibration: dict[str, dict[str, Any]], bins: int, members: int) -> Table:
    table = Table(title=f"bayesflow calibration over the choices ({members} posterior members; "
                        f"ECE over {bins} equal-width bins)")
    for column in ("task", "documents", "acc", f"ECE ({bins} bins)", "NLL", "Brier"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for task, row in sorted(calibration.items()):
        table.add_row(task, str(row["documents"]), *(f"{row[key]:.4f}" for key in ("accuracy", "ece", "nll", "brier")))
    return table


def _json(evaluation: Any) -> str:
    """lm-eval's results (its per-document samples left out: the calibration's
    ``probabilities`` and ``labels`` carry each document) and the calibration."""
    from lm_eval.utils import handle_non_serializable

    results = {key: value for key, value in evaluation.results.items() if key != "samples"}
    calibration = {task: {key: value.tolist() if hasattr(value, "tolist") else value for key, value in row.items()}
                   for task, row in evaluation.calibration.items()}
    payload = {"lm_eval": results, "bayesflow": {"calibration": calibration, "skipped": evaluation.skipped}}
    return json.dumps(payload, indent=2, default=handle_non_serializable)
