"""``laplace_kfac_fisher`` on a language model through the registered method: its builder
(as the fit stage calls it) gives the posterior of ``bayesflow.llm.kfac`` at two
temperatures under both conventions, its evidence reads the Kronecker curvature, and a
spec with it validates and runs; ``laplace_kfac_ggn`` is refused with the reason."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import bayesflow
from bayesflow.engines.evidence import mode_fit
from bayesflow.engines.evidence_prior import choose_prior
from bayesflow.engines.fit import fit
from bayesflow.engines.kfac import unpack
from bayesflow.errors import StageError
from bayesflow.llm.kfac import lm_kfac_factors, lm_kfac_layers, lm_kfac_posterior
from bayesflow.methods import METHODS
from bayesflow.temperature import Tempering
from tests.llm.spec_helpers import lm_spec, write_spec
from tests.llm.test_kfac import kronecker, setup
from tests.numerics import reordered

MLP = {"parameters": ["model.layers.1.mlp.*"]}  # the last layer's linear projections
PRIOR_VARIANCE = 100.0  # wide, so that the data's curvature moves the variances


def build(engine: str, problem, tempering: Tempering):
    config = METHODS.get(engine).spec.model_validate({"engine": engine, "batch_size": 2})
    return METHODS.get(engine).builder()(problem, tempering, config)


@pytest.mark.parametrize("trainable", [None, MLP], ids=["lora", "last_layer_mlp"])
@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_registered_kfac_fisher_is_the_language_models_kfac(trainable, temperature: float, convention: str) -> None:
    """Fitted in batches of two windows through engines.fit: the variances of
    lm_kfac_posterior over all five windows at once, and its Kronecker covariance."""
    _, problem, params, tokens, targets = setup(5, 8, 3, trainable, prior_variance=PRIOR_VARIANCE)
    tempering = Tempering(temperature, problem.num_data, convention)  # type: ignore[arg-type]
    posterior = fit(build("laplace_kfac_fisher", problem, tempering), params, tokens, targets,
                    torch.Generator().manual_seed(0)).posterior
    layers = lm_kfac_layers(problem)
    packed = lm_kfac_factors(problem, layers, params, tokens, targets)
    expected = lm_kfac_posterior(problem, layers, packed, tempering).variance(problem.dimension, params)
    prior_bound = temperature * PRIOR_VARIANCE / (1.0 if convention == "posterior" else temperature)
    assert float(expected.min()) < 0.9 * prior_bound  # the data moved some variances
    torch.testing.assert_close(posterior.mean, params)
    assert posterior.kronecker is not None
    torch.testing.assert_close(posterior.var, expected, **reordered(torch.float32, 256, scale=float(expected.max())))


def test_kfac_evidence_reads_the_kronecker_curvature() -> None:
    """log p(D|θ*) over every scored token + log N(θ*; 0, σ²) + (d/2) log 2π
    − ½ Σ_blocks log det(G ⊗ A/R + I/σ²), the blocks formed densely."""
    _, problem, params, tokens, targets = setup(4, 8, 3, prior_variance=0.5)
    state = fit(build("laplace_kfac_fisher", problem, Tempering(1.0, problem.num_data)), params, tokens, targets,
                torch.Generator().manual_seed(0)).state
    _, _, metrics = choose_prior(problem, state, mode_fit(problem, params, tokens, targets, 2),
                                 curvature_name="kfac_fisher")
    with torch.no_grad():
        log_likelihood = float(problem.log_likelihood(problem.forward(params, tokens), targets).double().sum())
    flat = params.double()
    log_prior = float(-0.5 * (flat**2 / 0.5).sum() - 0.5 * flat.numel() * math.log(2 * math.pi * 0.5))
    log_det = 0.0
    for factors in unpack(state.layers, state.curvature):  # LoRA adapters: weights only
        block = kronecker(factors).double()
        log_det += float(torch.linalg.slogdet(block + 2.0 * torch.eye(block.shape[0], dtype=torch.float64))[1])
    expected = log_likelihood + log_prior + 0.5 * flat.numel() * math.log(2 * math.pi) - 0.5 * log_det
    assert metrics["log_evidence"] == pytest.approx(expected, rel=1e-5)


def test_kfac_ggn_on_a_language_model_names_the_fisher() -> None:
    _, problem, _, _, _ = setup(2, 8, 3)
    with pytest.raises(StageError, match="one backward pass per class of the vocabulary .*use laplace_kfac_fisher"):
        build("laplace_kfac_ggn", problem, Tempering(1.0, problem.num_data))


@pytest.mark.slow
def test_a_spec_with_kfac_fisher_from_map_validates_and_runs(tmp_path: Path) -> None:
    """MAP then laplace_kfac_fisher at two temperatures: every fit finishes and the Laplace
    fits log their token metrics and evidence."""
    spec = lm_spec(tmp_path)
    spec["temperatures"] = [0.1, 1.0]
    spec["methods"]["kfac"] = {"engine": "laplace_kfac_fisher", "from": "map", "batch_size": 8}
    spec["tracking"] = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    spec["execution"] = {"cache_dir": str(tmp_path / "cache")}
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)))
    assert result.exit_code == 0, result.outcome.errors
    import mlflow

    client = mlflow.MlflowClient(result.tracking_uri)
    kfac = [client.get_run(run_id) for name, run_id in result.fit_runs.items() if "kfac" in name]
    assert len(kfac) == 2
    for run in kfac:
        metrics = run.data.metrics
        assert math.isfinite(metrics["log_evidence"]) and 0 < metrics["test_nll"] < 10
        assert metrics["test_perplexity"] == pytest.approx(math.exp(metrics["test_nll"]), rel=1e-9)


def test_a_glob_beyond_linear_layers_is_refused_at_validate(tmp_path: Path) -> None:
    """The last decoder layer's glob takes its norms' scales too: refused at the globs'
    line for laplace_kfac_fisher, naming them; the projections alone pass."""
    from bayesflow.variants import load_data
    from tests.llm.test_validate import line_of, problems

    spec = lm_spec(tmp_path)
    spec["model"]["trainable"] = {"parameters": ["model.layers.1.*"]}
    spec["methods"]["kfac"] = {"engine": "laplace_kfac_fisher", "from": "map"}
    message = problems(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'model.trainable.parameters')}:" in message
    assert ("laplace_kfac_fisher (methods.kfac) covers the weights and biases of linear layers (LoRA adapters, "
            "attention and MLP projections), but these globs also select model.layers.1.input_layernorm.weight, "
            "model.layers.1.post_attention_layernorm.weight; select only projections") in message
    spec["model"]["trainable"] = {"parameters": ["model.layers.1.self_attn.*_proj.*", "model.layers.1.mlp.*"]}
    assert load_data(bayesflow.load(write_spec(tmp_path, spec))).num_classes == 256
