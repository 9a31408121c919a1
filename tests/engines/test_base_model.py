"""The ``base`` method: no fit, a point mass at the starting point (``problem.init_params``),
on a plain MLP and on a language model's LoRA and last-layer subsets."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bayesflow.engines.fit import fit
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering


def base_fit(problem, inputs, targets, temperature: float = 1.0):
    spec = METHODS.get("base").spec.model_validate({"engine": "base"})
    engine = METHODS.get("base").builder()(problem, Tempering(temperature, problem.num_data), spec)
    generator = torch.Generator().manual_seed(4)
    start = problem.init_params(torch.Generator().manual_seed(4))
    return fit(engine, start, inputs, targets, generator), start


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_mlp_keeps_its_initialisation(temperature: float) -> None:
    """On any network the posterior is a point mass at init_params, with no update step
    and no loss history, at every temperature."""
    problem = build_problem(mlp(2, 3, hidden=[5]), categorical(), diag_normal(1.0), 12)
    inputs, targets = torch.randn(12, 2), torch.randint(0, 3, (12,))
    result, start = base_fit(problem, inputs, targets, temperature)
    assert torch.equal(result.posterior.mean, start)
    assert not result.posterior.var.any()
    assert result.steps == 0 and result.history == []


def test_an_update_leaves_the_parameters_and_reports_the_batch_loss() -> None:
    """Called directly, update keeps θ and returns −mean log p(y|x,θ) of the batch."""
    problem = build_problem(mlp(2, 3, hidden=[5]), categorical(), diag_normal(1.0), 12)
    spec = METHODS.get("base").spec.model_validate({"engine": "base"})
    engine = METHODS.get("base").builder()(problem, Tempering(1.0, 12), spec)
    start = problem.init_params(torch.Generator().manual_seed(0))
    inputs, targets = torch.randn(12, 2), torch.randint(0, 3, (12,))
    state, aux = engine.update(engine.init(start, torch.Generator()), (inputs, targets))
    expected = torch.nn.functional.cross_entropy(problem.forward(start, inputs), targets)
    assert torch.equal(state.params, start)
    torch.testing.assert_close(aux["loss"], expected)


@pytest.mark.parametrize("trainable", [
    {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}},
    {"parameters": ["model.layers.1.*"]},
])
def test_a_language_model_is_its_pretrained_self(trainable: dict) -> None:
    """On a LoRA subset the point mass has B = 0 (the adapted model's logits are the
    pretrained model's); on a last-layer subset it holds the model's own values."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from bayesflow.llm import build_causal_lm
    from bayesflow.llm.problem import build_lm_problem
    from tests.llm.conftest import tiny

    torch.manual_seed(0)
    model, names = build_causal_lm(tiny(trainable=trainable))
    windows = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    problem = build_lm_problem(model, names, diag_normal(1.0), 3 * 4, 4)
    result, start = base_fit(problem, windows, windows[:, -4:])
    mean = result.posterior.mean
    assert torch.equal(mean, start)
    values = dict(model.named_parameters())
    pieces = dict(zip(names, mean.split([values[n].numel() for n in names])))
    for name in names:
        if ".lora_B." in name:
            assert not pieces[name].any()
        elif ".lora_A." not in name:
            assert torch.equal(pieces[name], values[name].detach().reshape(-1))
    with model.disable_adapter() if "lora" in trainable else torch.no_grad():
        pretrained = model(windows, use_cache=False).logits[:, -5:-1]
    torch.testing.assert_close(problem.forward(mean, windows), pretrained)


def test_module_imports_without_torch() -> None:
    """The method module loads no torch (the spec layer imports it)."""
    code = "import sys, bayesflow.methods.base_model\nassert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
