"""``evaluate.statements`` in a run: every fit of a language model logs the statements
metrics and saves the per-statement arrays; the base model's row is the pretrained
model's own last-word NLL; a statements file that cannot serve is a located spec error
at validate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.errors import SpecError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.statements import cipher, encode_statements, read_statements
from bayesflow.spec import load_spec
from bayesflow.tracking import InMemoryTracker
from bayesflow.variants import load_data
from tests.llm.spec_helpers import lm_spec, tiny_lm, write_spec

STATEMENTS = Path(__file__).parent / "files" / "statements.txt"
METHODS = {
    "base": {"engine": "base"},
    "map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 1, "batch_size": 8},
    "ensemble": {"engine": "deep_ensemble", "members": 3, "optimizer": {"name": "adamw", "lr": 0.05},
                 "epochs": 1, "batch_size": 8},
}


def statements_spec(folder: Path, **statements: Any) -> dict[str, Any]:
    shutil.copy(STATEMENTS, folder / "statements.txt")
    return lm_spec(folder, methods=METHODS, evaluate={
        "n_samples": 3, "statements": {"in_distribution": "statements.txt", **statements}})


def test_every_fit_logs_the_statements_metrics_and_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row per method with the statements metrics: EU = 0 and an EU AUROC of 0.5 for
    the one-vector fits (base, MAP), EU > 0 for the ensemble; the per-statement arrays
    are in evaluation.npz; the base model's NLL is the pretrained model's own."""
    monkeypatch.chdir(tmp_path)
    spec = {**statements_spec(tmp_path), "execution": {"cache_dir": str(tmp_path / "cache")}}
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker).set_index("method")
    assert set(frame.index) == set(METHODS)
    for method in ("base", "map"):
        assert frame.loc[method, "statements_eu_in"] == 0 and frame.loc[method, "statements_auroc_eu"] == 0.5
    assert frame.loc["ensemble", "statements_eu_in"] > 0
    assert frame[["statements_auroc_tu", "statements_auroc_eu"]].apply(lambda v: v.between(0, 1)).all().all()
    arrays = bayesflow.evaluations(result.run_id, tracker=tracker)
    assert len(arrays) == 3
    for found in arrays.values():
        for name in ("nll", "tu", "au", "eu", "tokens"):
            assert found[f"statements_{name}_in"].shape == found[f"statements_{name}_ood"].shape == (7,)
    # the pretrained model itself, one statement at a time: the base row's mean NLL
    torch.manual_seed(0)
    model, _ = build_causal_lm(tiny_lm())
    texts = read_statements(STATEMENTS)
    for suffix, statements in (("in", texts), ("ood", cipher(texts, 0))):
        nll = []
        with model.disable_adapter(), torch.no_grad():
            for tokens, start in encode_statements(statements):
                logits = model(torch.as_tensor(tokens)[None], use_cache=False).logits[0, start - 1 : -1]
                nll.append(-float(logits.double().log_softmax(-1)[np.arange(len(tokens) - start), tokens[start:]].sum()))
        assert frame.loc["base", f"statements_nll_{suffix}"] == pytest.approx(np.mean(nll), rel=1e-5)


@pytest.mark.parametrize(("statements", "content", "expected"), [
    ({"in_distribution": "absent.txt"}, None, "evaluate.statements.in_distribution: no file"),
    ({"ood": "empty.txt"}, b"", "evaluate.statements.ood: '"),
    ({"in_distribution": "latin1.txt"}, "Caf\u00e9 au lait.\n".encode("latin-1"),
     "evaluate.statements.in_distribution: '"),
])
def test_a_statements_file_that_cannot_serve_is_located_at_validate(
    tmp_path: Path, statements: dict[str, str], content: bytes | None, expected: str
) -> None:
    """Missing, empty, not UTF-8: a spec error at the key's line of the spec file."""
    if content is not None:
        (tmp_path / next(iter(statements.values()))).write_bytes(content)
    path = write_spec(tmp_path, statements_spec(tmp_path, **statements))
    with pytest.raises(SpecError) as caught:
        load_data(load_spec(path))
    (problem,) = caught.value.problems
    lines = path.read_text().splitlines()
    key = next(iter(statements))
    line = next(number for number, text in enumerate(lines, 1) if text.strip().startswith(f"{key}:"))
    assert problem.startswith(f"{path}:{line}:")
    assert expected in problem


@pytest.mark.parametrize("ood", ["cipher", "file"])
def test_a_statement_longer_than_the_context_is_located_at_validate(tmp_path: Path, ood: str) -> None:
    """A statement of 300 bytes on a GPT-2 with 128 positions is a located spec error at
    validate naming its file, line, length and the context, not the evaluate stage's
    `index out of range in self` (issue 33, item 14)."""
    long = "I " + "very " * 59 + "end"  # 300 bytes, all of them read (no final punctuation)
    assert len(long.encode()) == 300
    text = STATEMENTS.read_text() + long + "\n"
    (tmp_path / "long.txt").write_text(text)
    spec = statements_spec(tmp_path)
    spec["model"] = {"name": "causal_lm", "family": "gpt2", "hidden_size": 32, "layers": 2, "heads": 2,
                     "context": 128, "trainable": {"parameters": ["transformer.h.1.*"]}}
    key = "in_distribution" if ood == "cipher" else "ood"
    spec["evaluate"]["statements"][key] = "long.txt"
    path = write_spec(tmp_path, spec)
    with pytest.raises(SpecError) as caught:
        load_data(load_spec(path))
    (problem,) = caught.value.problems
    line = next(number for number, entry in enumerate(path.read_text().splitlines(), 1)
                if entry.strip().startswith(f"{key}:"))
    assert problem.startswith(f"{path}:{line}:")
    assert (f"evaluate.statements.{key}: {str(tmp_path / 'long.txt')!r} line {len(text.splitlines())} is a "
            "statement of 300 byte tokens (UTF-8 bytes), but the model's context is 128 tokens") in problem
    assert "shorten it to at most 128 tokens" in problem


@pytest.mark.slow
def test_several_named_ood_sets_each_get_their_metrics_and_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ood: {cipher: cipher, other: file}``: each set's NLL, uncertainties and AUROCs end
    in its name and equal a one-set run's against that set; the in-distribution numbers
    are the same in both."""
    monkeypatch.chdir(tmp_path)
    texts = read_statements(STATEMENTS)
    (tmp_path / "other.txt").write_text("\n".join(reversed(texts)) + "\n")  # another set, 7 lines
    results = {}
    for label, ood in (("both", {"cipher": "cipher", "other": "other.txt"}), ("one", "other.txt")):
        folder = tmp_path / label
        folder.mkdir()
        shutil.copy(tmp_path / "other.txt", folder / "other.txt")
        spec = {**statements_spec(folder, ood=ood), "execution": {"cache_dir": str(folder / "cache")}}
        spec["methods"] = {"ensemble": METHODS["ensemble"]}
        tracker = InMemoryTracker(folder / "artifacts")
        result = bayesflow.run(bayesflow.load(write_spec(folder, spec)), tracker=tracker)
        assert result.exit_code == 0, result.outcome.errors
        results[label] = (bayesflow.results(result.run_id, tracker=tracker).iloc[0],
                          next(iter(bayesflow.evaluations(result.run_id, tracker=tracker).values())))
    (both, both_arrays), (one, one_arrays) = results["both"], results["one"]
    for score in ("tu", "eu"):
        for end in ("", "_per_token"):
            assert f"statements_auroc_{score}{end}" not in both  # no unnamed set
            assert both[f"statements_auroc_{score}{end}_other"] == pytest.approx(one[f"statements_auroc_{score}{end}"])
            assert 0 <= both[f"statements_auroc_{score}{end}_cipher"] <= 1
    for kind in ("nll", "tu", "eu"):
        assert both[f"statements_{kind}_in"] == pytest.approx(one[f"statements_{kind}_in"])
        assert both[f"statements_{kind}_other"] == pytest.approx(one[f"statements_{kind}_ood"])
        np.testing.assert_allclose(both_arrays[f"statements_{kind}_other"], one_arrays[f"statements_{kind}_ood"])
        assert both_arrays[f"statements_{kind}_cipher"].shape == (7,)


@pytest.mark.parametrize(("ood", "expected"), [
    ({}, "names no set"),
    ({"Esperanto": "cipher"}, "set name 'Esperanto' is not lower-case letters"),
    ({"in": "cipher"}, "set name 'in' is not"),
])
def test_a_bad_ood_set_name_is_a_located_spec_error(tmp_path: Path, ood: dict[str, str], expected: str) -> None:
    """Set names become metric names: empty mappings, capitals and `in` are refused."""
    path = write_spec(tmp_path, statements_spec(tmp_path, ood=ood))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert any(expected in problem and "evaluate.statements.ood" in problem for problem in caught.value.problems)


def test_a_named_set_that_cannot_serve_names_its_key(tmp_path: Path) -> None:
    """A missing file in a named set: the error names ``evaluate.statements.ood.<name>``."""
    path = write_spec(tmp_path, statements_spec(tmp_path, ood={"cipher": "cipher", "other": "absent.txt"}))
    with pytest.raises(SpecError) as caught:
        load_data(load_spec(path))
    assert any("evaluate.statements.ood.other: no file" in problem for problem in caught.value.problems)
