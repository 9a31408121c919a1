"""A language-model posterior saved as its trainable part plus a reference to the base
model, and loaded back to the same predictions."""

from __future__ import annotations

import json

import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.product import load_lm_posterior, save_lm_posterior
from bayesflow.posterior.files import PosteriorError
from bayesflow.priors import diag_normal
from bayesflow.spec.llm import CausalLMSpec
from tests.llm.conftest import tiny

SCORED = 3


def test_round_trip_saves_only_the_trainable_part(tmp_path) -> None:
    spec = CausalLMSpec.model_validate(tiny(seed=7))
    model, names = build_causal_lm(spec)
    problem = build_lm_problem(model, names, diag_normal(1.0), 10, SCORED)
    mean = problem.init_params(torch.Generator().manual_seed(0)) + 0.1
    posterior = Posterior(mean=mean, var=torch.full_like(mean, 0.01))
    save_lm_posterior(tmp_path / "p", spec, SCORED, problem, posterior)
    frozen_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert (tmp_path / "p" / "posterior.npz").stat().st_size < frozen_bytes / 10
    assert json.loads((tmp_path / "p" / "base_model.json").read_text())["model"]["seed"] == 7
    torch.manual_seed(123)  # loading rebuilds the base weights under the spec's seed
    loaded = load_lm_posterior(tmp_path / "p")
    assert loaded.problem.param_names == names
    torch.testing.assert_close(loaded.posterior.mean, mean, rtol=0, atol=0)
    windows = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded.problem.forward(mean, windows), problem.forward(mean, windows),
                               rtol=0, atol=0)


def test_a_changed_base_model_or_missing_file_is_refused(tmp_path) -> None:
    spec = CausalLMSpec.model_validate(tiny())
    model, names = build_causal_lm(spec)
    problem = build_lm_problem(model, names, diag_normal(1.0), 10, SCORED)
    mean = problem.init_params(torch.Generator().manual_seed(0))
    save_lm_posterior(tmp_path / "p", spec, SCORED, problem, Posterior(mean=mean, var=mean * 0))
    reference = json.loads((tmp_path / "p" / "base_model.json").read_text())
    reference["model"]["trainable"]["lora"]["r"] = 3
    (tmp_path / "p" / "base_model.json").write_text(json.dumps(reference))
    with pytest.raises(PosteriorError, match="not the file's"):
        load_lm_posterior(tmp_path / "p")
    with pytest.raises(PosteriorError, match="lacks base_model.json"):
        load_lm_posterior(tmp_path)
