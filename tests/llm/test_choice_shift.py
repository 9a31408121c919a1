"""Shift sets of multiple-choice questions (``data.shift``): every problem of a shift file
located as the main file's are; under a tiny config-built Llama's posterior, the shift
metrics and AUROCs equal a direct computation on the set alone; a run logs them and saves
the per-question probabilities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

import bayesflow
from bayesflow.dag.plan import Stage
from bayesflow.engines.base import Posterior
from bayesflow.evaluate import evaluate_full, sample_probabilities
from bayesflow.evaluate.metrics import classification_metrics
from bayesflow.tracking import InMemoryTracker
from tests.llm.spec_helpers import write_spec
from tests.llm.test_multiple_choice import BAD_RECORDS, choice_spec, context_of, validate
from tests.llm.test_validate import line_of

# Four questions of other subjects, the shift set "far".
FAR = (
    '{"question": "Which planet is largest?", "choices": ["Mars", "Jupiter", "Venus", "Mercury"], "answer": 1}\n'
    '{"question": "What is 3 times 3?", "choices": ["6", "8", "9", "12"], "answer": 2}\n'
    '{"question": "Which is a noun?", "choices": ["run", "blue", "table", "quickly"], "answer": 2}\n'
    '{"question": "Who wrote Hamlet?", "choices": ["Shakespeare", "Dickens", "Austen", "Homer"], "answer": 0}\n'
)


def shifted_spec(folder: Path, **sections: Any) -> dict[str, Any]:
    """:func:`choice_spec` with the shift set ``far`` (``far.jsonl``)."""
    (folder / "far.jsonl").write_text(FAR)
    spec = choice_spec(folder, **sections)
    spec["data"] = {**spec["data"], "shift": {"far": "far.jsonl"}}
    return spec


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_shift_record_is_located_as_the_main_files_are(tmp_path: Path, case: str) -> None:
    """A missing field, an answer out of range, a choice list of another length than the
    main set's, a line that is not JSON: the spec's line and column of `data.shift.far`, the file's
    line, the field."""
    record, expected = BAD_RECORDS[case]
    spec = shifted_spec(tmp_path)
    lines = FAR.splitlines()
    (tmp_path / "far.jsonl").write_text("\n".join([*lines[:2], record, *lines[2:]]) + "\n")
    message = validate(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'data.shift.far')}:5: data.shift.far: far.jsonl {expected}" in message


def test_a_missing_shift_file_and_a_too_long_prompt_are_located(tmp_path: Path) -> None:
    """No such file; a prompt longer than the model's context: both at `data.shift.far`."""
    spec = shifted_spec(tmp_path)
    spec["data"]["shift"] = {"far": "nowhere.jsonl"}
    message = validate(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'data.shift.far')}" in message
    assert "data.shift.far: no file" in message and "nowhere.jsonl" in message
    spec = shifted_spec(tmp_path)
    long = '{"question": "' + "why " * 40 + '", "choices": ["a", "b", "c", "d"], "answer": 0}'
    (tmp_path / "far.jsonl").write_text(FAR + long + "\n")
    message = validate(tmp_path, spec)
    assert "data.shift.far: far.jsonl line 5: its prompt is" in message


def test_shift_metrics_under_the_test_draw_equal_the_set_alone(tmp_path: Path) -> None:
    """Three members through the tiny Llama: the shift set's metrics equal the test
    metrics of its probabilities computed alone, and its AUROCs sklearn's on the entropies."""
    context = context_of(tmp_path, **{key: value for key, value in shifted_spec(tmp_path).items()
                                      if key == "data"})
    stage = Stage("fit/map/T=shared/seed=0", "fit", (), "k", "map", "map", None, 0)
    problem, likelihood, _ = context.problem(stage)
    generator = torch.Generator().manual_seed(0)
    start = problem.init_params(generator)
    samples = start + 0.5 * torch.randn(3, start.shape[0], generator=generator)
    x_test, y_test = context.test_data(problem.device)
    ((name, x_far, y_far),) = context.dataset.shifts
    result = evaluate_full(problem, likelihood, Posterior(samples=samples), x_test, y_test, n_samples=3,
                           generator=generator, shifts=[(name, torch.as_tensor(x_far), torch.as_tensor(y_far))])
    alone = sample_probabilities(problem, likelihood, samples, torch.as_tensor(x_far)).double().numpy()
    test = sample_probabilities(problem, likelihood, samples, x_test).double().numpy()
    for metric, value in classification_metrics(alone.mean(0), y_far).items():
        assert result.metrics[metric.replace("test_", "shift_") + "_far"] == pytest.approx(value, abs=1e-6)
    labels = np.r_[np.zeros(len(y_test)), np.ones(len(y_far))]

    def entropy(p: np.ndarray) -> np.ndarray:
        return -(p * np.log(p)).sum(-1)

    total = np.r_[entropy(test.mean(0)), entropy(alone.mean(0))]
    epistemic = total - np.r_[entropy(test).mean(0), entropy(alone).mean(0)]
    assert result.metrics["shift_auroc_total_far"] == pytest.approx(roc_auc_score(labels, total))
    assert result.metrics["shift_auroc_epistemic_far"] == pytest.approx(roc_auc_score(labels, epistemic))
    assert np.allclose(result.arrays["shift_far_probabilities"], alone.mean(0), atol=1e-6)


@pytest.mark.slow
def test_a_run_logs_the_shift_metrics_and_saves_per_question_probabilities(tmp_path: Path) -> None:
    """MAP and a diagonal Laplace from it: each fit logs `shift_*_far`; MAP, one vector,
    has an EU AUROC of exactly 0.5; evaluation.npz holds the questions' probabilities."""
    methods = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 4},
               "laplace": {"engine": "laplace_diag_ggn", "from": "map"}}
    spec = {**shifted_spec(tmp_path, methods=methods), "execution": {"cache_dir": str(tmp_path / "cache")}}
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker).set_index("method")
    for metric in ("accuracy", "nll", "ece", "brier", "auroc_total", "auroc_epistemic"):
        assert frame[f"shift_{metric}_far"].notna().all(), metric
    assert frame["shift_accuracy_far"].isin([0, 0.25, 0.5, 0.75, 1]).all()
    assert frame.loc["map", "shift_auroc_epistemic_far"] == 0.5
    arrays = list((tmp_path / "cache").rglob("evaluation.npz"))
    assert arrays and all(np.load(file)["shift_far_probabilities"].shape == (4, 4) for file in arrays)


def test_the_shift_sets_are_in_the_evaluations_key(tmp_path: Path) -> None:
    """Editing a shift file changes the evaluations' keys, not the fits'."""
    keys = []
    for answer in ("1", "2"):
        spec = shifted_spec(tmp_path)
        (tmp_path / "far.jsonl").write_text(FAR.replace('"answer": 1', f'"answer": {answer}'))
        keys.append({stage.name: stage.key for stage in bayesflow.plan(bayesflow.load(write_spec(tmp_path, spec)))
                     .stages.values()})
    changed = sorted(name for name in keys[0] if keys[0][name] != keys[1][name])
    assert changed and all(name.startswith("evaluate/") for name in changed)


def test_a_shift_set_name_that_cannot_end_a_metric_name_is_refused_where_written(tmp_path: Path) -> None:
    """A space in a set's name: at `data.shift`, with the characters allowed."""
    spec = shifted_spec(tmp_path)
    spec["data"]["shift"] = {"far away": "far.jsonl"}
    message = validate(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'data.shift')}" in message
    assert "use letters, digits, `_`, `-` or `.`, got ['far away']" in message
