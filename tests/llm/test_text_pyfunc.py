"""The pyfunc model of a language model's fit, through a real MLflow store: texts in, their
posterior-predictive scores out, equal to a computation with the model's own forward; its
folder holds the trainable part, never the frozen weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import bayesflow
from bayesflow.evaluate import draw_samples
from bayesflow.evaluate.uncertainty import decompose_uncertainty
from bayesflow.llm.product import load_lm_posterior
from bayesflow.posterior import PosteriorError, load_posterior, score_texts
from bayesflow.posterior.texts import text_windows
from bayesflow.tracking.text_pyfunc import portable_spec
from tests.llm.spec_helpers import lm_spec, write_spec

pytestmark = pytest.mark.slow

SHORT = "The bees swarmed."  # 17 bytes: one window (data.length is 32)
LONG = "In May the hive was loud, and by June the frames were heavy with honey!!"  # 72 bytes
SUBSETS = {
    "lora": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}},
    "last_layer": {"parameters": ["model.layers.1.*"]},
}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, Path]]:
    """One run per subset (MAP and 2-chain SGHMC): subset -> (store, SGHMC fit run, folder)."""
    found = {}
    for subset, trainable in SUBSETS.items():
        folder = tmp_path_factory.mktemp(subset)
        spec = lm_spec(folder)
        spec["model"]["trainable"] = trainable
        spec["methods"]["sghmc"] = {"engine": "sghmc", "lr": 0.001, "epochs": 1, "batch_size": 8, "chains": 2}
        spec["tracking"] = {"uri": f"sqlite:///{folder / 'mlflow.db'}"}
        spec["execution"] = {"cache_dir": str(folder / "cache")}
        result = bayesflow.run(bayesflow.load(write_spec(folder, spec)))
        assert result.exit_code == 0, result.outcome.errors
        run = next(run_id for name, run_id in result.fit_runs.items() if "sghmc" in name)
        found[subset] = (result.tracking_uri, run, folder)
    return found


def test_windows_score_every_token_after_the_first_once() -> None:
    """Windows of 32 tokens every 16, the last one ending at the text's end."""
    assert text_windows(72, 32, 16) == [(0, 32, 1), (16, 48, 32), (32, 64, 48), (40, 72, 64)]
    assert text_windows(17, 32, 16) == [(0, 17, 1)]
    for count, length, stride in ((72, 32, 32), (100, 8, 3), (33, 32, 100), (2, 32, 32)):
        windows = text_windows(count, length, stride)
        scored = [token for _, end, first in windows for token in range(first, end)]
        assert scored == list(range(1, count))
        assert all(end - start <= length and first > start for start, end, first in windows)


def _expected(posterior: Any, texts: list[str], n_samples: int, seed: int) -> pd.DataFrame:
    """The scores by hand: the model itself with each member's tensors set, on the windows
    written out for these lengths (32 tokens every 16), one window at a time."""
    windows = {17: [(0, 17, 1)], 72: [(0, 32, 1), (16, 48, 32), (32, 64, 48), (40, 72, 64)]}
    members = draw_samples(posterior.posterior, n_samples, torch.Generator().manual_seed(seed))
    models = [posterior.module(member) for member in members]
    rows = []
    for text in texts:
        ids = torch.tensor(list(text.encode()))
        probs, labels = [], []
        for start, end, first in windows[len(ids)]:
            with torch.no_grad():
                logits = torch.stack([model(ids[None, start:end]).logits[0] for model in models])
            probs.append(logits.double().softmax(-1)[:, first - start - 1 : end - start - 1])
            labels.append(ids[first:end])
        each, label = torch.cat(probs, 1), torch.cat(labels)
        chosen = each.mean(0).gather(-1, label[:, None])[:, 0]
        split = decompose_uncertainty(each)
        nll = float(-chosen.log().sum())
        rows.append({"tokens": len(ids) - 1, "nll": nll, "nll_per_token": nll / (len(ids) - 1),
                     "perplexity": np.exp(nll / (len(ids) - 1)), "uncertainty_total": split.total.mean(),
                     "uncertainty_aleatoric": split.aleatoric.mean(), "uncertainty_epistemic": split.epistemic.mean()})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_pyfunc_scores_equal_the_models_own_forward(fitted: Any, subset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlflow.pyfunc.load_model(runs:/<fit>/model).predict(frame)` is the predictive of
    the members the draw gives, computed with the language model's own forward."""
    import mlflow.pyfunc

    uri, run_id, _ = fitted[subset]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    frame = pd.DataFrame({"text": [SHORT, LONG]})
    scores = model.predict(frame, params={"n_samples": 3, "seed": 1})
    expected = _expected(load_posterior(run_id, tracking_uri=uri), [SHORT, LONG], 3, 1)
    assert list(scores.columns) == list(expected.columns)
    assert scores["tokens"].tolist() == [16, 71]
    pd.testing.assert_frame_equal(scores, expected, check_dtype=False, rtol=1e-6, atol=1e-9)
    assert (scores["uncertainty_epistemic"] > 0).all()  # two chains' samples differ
    default = model.predict(frame)  # the evaluate stage's draw, as load_posterior's
    direct = score_texts(load_posterior(run_id, tracking_uri=uri), [SHORT, LONG])
    np.testing.assert_allclose(default["nll"], direct["nll"], rtol=1e-12)


def test_model_folder_holds_the_trainable_part_only(fitted: Any, tmp_path: Path) -> None:
    """The model's files: the posterior over the trainable tensors plus a few small text
    files; with LoRA, far below the frozen model's bytes."""
    import mlflow

    for subset, (uri, run_id, _) in fitted.items():
        local = Path(mlflow.MlflowClient(uri).download_artifacts(run_id, "model", str(tmp_path / subset)))
        files = {path.relative_to(local).as_posix(): path.stat().st_size for path in local.rglob("*") if path.is_file()}
        artifacts = {name for name in files if name.startswith("artifacts/")}
        assert artifacts == {f"artifacts/{name}" for name in
                             ("posterior.npz", "resolved.yaml", "cell.json", "base_model.json")}
        posterior = load_posterior(run_id, tracking_uri=uri)
        trainable = posterior.posterior.samples.numel() * 4  # float32 samples over the subset
        frozen = sum(p.numel() * p.element_size() for p in posterior.module().parameters())
        assert files["artifacts/posterior.npz"] < trainable + 4096
        assert sum(files.values()) - files["artifacts/posterior.npz"] < 32_000  # text files
        if subset == "lora":
            assert sum(files.values()) < frozen / 3


def test_bad_frames_get_clear_errors(fitted: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No text column, a non-string or an empty text: an error naming what is wrong."""
    import mlflow.pyfunc

    uri, run_id, _ = fitted["lora"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    with pytest.raises(Exception, match="missing inputs \\['text'\\]"):
        model.predict(pd.DataFrame({"review": ["a text"]}))
    with pytest.raises(Exception, match="Incompatible input types for column text"):
        model.predict(pd.DataFrame({"text": [3, 4]}))
    with pytest.raises(PosteriorError, match="text row 1: expected a string, got a missing value"):
        model.predict(pd.DataFrame({"text": ["a text", None]}))
    with pytest.raises(PosteriorError, match="text row 1: an empty text has no token to score"):
        model.predict(pd.DataFrame({"text": ["a text", ""]}))
    posterior = load_posterior(run_id, tracking_uri=uri)
    with pytest.raises(PosteriorError, match="no 'text' column .*columns: \\['review'\\]"):
        score_texts(posterior, pd.DataFrame({"review": ["a text"]}))
    with pytest.raises(PosteriorError, match="text row 0: expected a string, got int 3"):
        score_texts(posterior, pd.DataFrame({"text": [3, 4]}))
    with pytest.raises(PosteriorError, match="row 0: 'a' is 1 token; scoring needs at least 2"):
        score_texts(posterior, ["a"])


def test_a_folder_model_is_referenced_by_its_absolute_path(tmp_path: Path) -> None:
    """A relative `model.path` becomes absolute in the model's spec; `package:` stays."""
    text = yaml.safe_dump({"name": "x", "model": {"name": "causal_lm", "path": "models/tiny"}})
    assert yaml.safe_load(portable_spec(text, tmp_path))["model"]["path"] == str(tmp_path / "models" / "tiny")
    shipped = yaml.safe_dump({"name": "x", "model": {"name": "causal_lm", "path": "package:lm/checkpoint"}})
    assert portable_spec(shipped, tmp_path) == shipped


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, Path, Path]:
    """A run whose `model.path` folder (weights and the byte-level tokenizer, `tokenizer:
    model`) is written relative to the spec: (its result, its fit run, the model folder,
    another working directory)."""
    from bayesflow.llm.source import build_base_model
    from bayesflow.llm.tokenizer import save_byte_tokenizer
    from bayesflow.spec.llm import CausalLMSpec
    from tests.llm.spec_helpers import tiny_lm

    tmp_path = tmp_path_factory.mktemp("folder_model")
    spec_folder, elsewhere = tmp_path / "spec", tmp_path / "work"
    elsewhere.mkdir(parents=True)
    folder = spec_folder / "models" / "tiny"
    build_base_model(CausalLMSpec.model_validate(tiny_lm())).save_pretrained(folder)
    save_byte_tokenizer(folder)
    spec_folder.mkdir(exist_ok=True)
    spec = lm_spec(spec_folder, model={"name": "causal_lm", "path": "models/tiny", "trainable": tiny_lm()["trainable"]})
    spec["data"]["tokenizer"] = "model"
    spec["tracking"] = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    spec["execution"] = {"cache_dir": str(tmp_path / "cache")}
    result = bayesflow.run(bayesflow.load(write_spec(spec_folder, spec)))
    assert result.exit_code == 0, result.outcome.errors
    (run_id,) = result.fit_runs.values()
    return result, run_id, folder, elsewhere


def test_a_folder_model_with_its_tokenizer_scores_from_any_folder(
    folder_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `model.path` folder written relative to the spec: the logged model records its
    absolute path and scores from another working directory, as the byte tokens of a
    config-built twin would."""
    import mlflow
    import mlflow.pyfunc

    result, run_id, folder, elsewhere = folder_run
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", result.tracking_uri)
    local = Path(mlflow.MlflowClient(result.tracking_uri).download_artifacts(run_id, "model", str(elsewhere / "m")))
    recorded = yaml.safe_load((local / "artifacts" / "resolved.yaml").read_text())["model"]["path"]
    assert recorded == str(folder.resolve())
    assert not list(local.rglob("*.safetensors"))
    scores = mlflow.pyfunc.load_model(f"runs:/{run_id}/model").predict(pd.DataFrame({"text": [SHORT, LONG]}))
    posterior = bayesflow.load_posterior(local)  # the downloaded folder: its own spec and cell
    np.testing.assert_allclose(scores["nll"], score_texts(posterior, [SHORT, LONG])["nll"], rtol=1e-12)
    assert scores["tokens"].tolist() == [16, 71]  # one token a byte
    # The run's posterior folder refers to the base model the same way.
    saved = Path(mlflow.MlflowClient(result.tracking_uri).download_artifacts(run_id, "posterior", str(elsewhere / "p")))
    assert json.loads((saved / "base_model.json").read_text())["model"]["path"] == str(folder.resolve())
    assert load_lm_posterior(saved).problem.param_names == posterior.param_names


def test_a_folder_model_relative_to_its_spec_loads_by_run_id_from_any_folder(
    folder_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`load_posterior(<fit run id>)` from another working directory rebuilds the base model
    from the absolute path the fit recorded (`posterior/base_model.json`), not from the
    spec's relative `model.path` taken from the working directory (issue 33, item 11)."""
    result, run_id, folder, elsewhere = folder_run
    monkeypatch.chdir(elsewhere)
    posterior = bayesflow.load_posterior(run_id, tracking_uri=result.tracking_uri)
    assert Path(posterior.spec.model.path) == folder.resolve()
    assert score_texts(posterior, [SHORT])["tokens"].tolist() == [16]
