"""The bundled cold_posterior_imdb workflow: it validates, scales up as described, and runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import bayesflow
from bayesflow.errors import SpecError
from bayesflow.tracking import InMemoryTracker
from tests.conftest import write

WORKFLOW = Path(__file__).parents[2] / "workflows" / "cold_posterior_imdb.yaml"

# The overrides the workflow's description gives for the paper's scale on a GPU.
PAPER_SCALE = [
    "data.path=../shared/data",
    "data.max_train=null",
    "data.max_test=null",
    "data.vocab_size=20000",
    "model.embedding_size=128",
    "model.filters=64",
    "model.hidden_size=128",
    "seeds=[0,1,2,3,4]",
    "methods.mle.epochs=30",
    "methods.map.epochs=30",
    "methods.vi.epochs=30",
    "methods.vi.from=null",
    "methods.sghmc.epochs=60",
    "methods.sghmc.burn_in=20000",
    "methods.sghmc.thin=1000",
    "methods.sghmc.from=null",
    "methods.parallel_sghmc.epochs=30",
    "methods.parallel_sghmc.chains=35",
    "methods.parallel_sghmc.from=null",
    "evaluate.n_samples=50",
    "execution.device=cuda",
]

# Sizes that make a fit take a fraction of a second on one CPU thread.
TINY = [
    "data.max_train=64",
    "data.max_test=32",
    "data.vocab_size=200",
    "data.max_length=24",
    "model.embedding_size=8",
    "model.filters=8",
    "model.hidden_size=8",
    "seeds=[0]",
    "temperatures=[1.0]",
    "evaluate.n_samples=4",
    "report.enabled=false",
]


def test_model_vocabulary_follows_the_data() -> None:
    """model.vocabulary_size is `${data.vocab_size}`, so one override changes both."""
    loaded = bayesflow.load(WORKFLOW, ["data.vocab_size=1234"])
    assert loaded.spec.data.name == "imdb"
    assert loaded.spec.model.vocabulary_size == loaded.spec.data.vocab_size == 1234


def test_the_grid_is_the_papers() -> None:
    """Temperatures {0.03, 0.1, 0.3, 1, 3}, prior variance 1/40, the paper's methods."""
    spec = bayesflow.load(WORKFLOW).spec
    assert spec.temperatures == [0.03, 0.1, 0.3, 1.0, 3.0]
    assert spec.prior.name == "diag_normal" and spec.prior.variance == pytest.approx(1 / 40)
    engines = {name: method.engine for name, method in spec.methods.items()}
    assert sorted(engines.values()) == sorted([
        "mle", "map", "laplace_diag_fisher", "laplace_diag_fisher", "laplace_diag_ggn",
        "laplace_diag_ggn", "vi_diag", "sghmc", "sghmc",
    ])
    predictions = {spec.methods[name].prediction for name in engines if "laplace" in engines[name]}
    assert predictions == {"sampled", "linearized"}


def test_paper_scale_overrides_validate_and_are_described() -> None:
    """Every override the description lists for the paper's scale is valid and named there."""
    loaded = bayesflow.load(WORKFLOW, PAPER_SCALE)
    assert loaded.spec.methods["parallel_sghmc"].chains == 35
    assert all(loaded.spec.methods[name].from_ is None for name in ("vi", "sghmc", "parallel_sghmc"))
    assert loaded.spec.model.vocabulary_size == 20_000
    description = " ".join(loaded.spec.description.split())
    missing = [override for override in PAPER_SCALE if override not in description]
    assert missing == []


def test_a_smaller_model_vocabulary_is_refused(tmp_path: Path) -> None:
    """A cnn_lstm with fewer embedding rows than the data's token ids fails validation."""
    text = WORKFLOW.read_text().replace("vocabulary_size: ${data.vocab_size}", "vocabulary_size: 100")
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        bayesflow.load(path)
    (problem,) = info.value.problems
    assert problem.endswith(
        "model.vocabulary_size: is 100, but the data have 5000 token ids (data.vocab_size); "
        "set it to `${data.vocab_size}`"
    )


@pytest.mark.slow
def test_tiny_run_fits_and_evaluates_every_kind_of_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow shrunk to 64 reviews, one epoch and one method of each kind runs."""
    monkeypatch.chdir(tmp_path)
    resolved = bayesflow.load(WORKFLOW, TINY).resolved
    keep = ["map", "laplace_ggn_linearized", "vi", "parallel_sghmc"]
    methods = {name: dict(resolved["methods"][name]) for name in keep}
    for method in methods.values():
        if "epochs" in method:
            method["epochs"] = 1
    methods["parallel_sghmc"]["chains"] = 2
    # No plots: they read results back from MLflow, which the in-memory tracker replaces.
    spec = {
        **resolved, "methods": methods, "plots": [],
        "execution": {"cache_dir": str(tmp_path / "cache")},
    }
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(spec), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker)
    assert sorted(frame["method"]) == sorted(keep)
    assert frame["test_accuracy"].between(0, 1).all() and frame["test_nll"].notna().all()
