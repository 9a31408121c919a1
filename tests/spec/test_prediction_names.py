"""The closed-form predictive is called `closed_form` (probit for classification, the exact
Gaussian for a regression); its former name `linearized_probit` still validates, to it,
with the keys it had; `linearized` says that it samples."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from bayesflow.dag.plan import plan_workflow
from bayesflow.methods.registry import METHODS
from bayesflow.spec import load_spec
from bayesflow.spec.settings import EvaluateSpec

GAUSSIAN = ("laplace_diag_ggn", "vi_diag", "ekf_diag_fisher", "conjugate_linear")


@pytest.mark.parametrize("engine", GAUSSIAN)
def test_closed_form_is_a_prediction_and_the_former_name_reads_as_it(engine: str) -> None:
    spec = METHODS.get(engine).spec
    new = spec.model_validate({"engine": engine, "prediction": "closed_form"})
    assert new.model_dump()["prediction"] == "closed_form"
    former = spec.model_validate({"engine": engine, "prediction": "linearized_probit"})
    # read as the new name, which `--resolved` prints
    assert former.model_dump(mode="json")["prediction"] == "closed_form"
    with pytest.raises(pydantic.ValidationError):
        spec.model_validate({"engine": engine, "prediction": "probit"})
    assert EvaluateSpec.model_validate({"prediction": "linearized_probit"}).prediction == "closed_form"


def test_a_spec_with_the_former_name_keeps_its_keys(tiny_spec: Path) -> None:
    """A spec written with `linearized_probit` plans the keys it planned before the rename
    (its payloads still spell the former name), and the new name plans the same."""
    method = "+methods.laplace_cf={engine: laplace_diag_ggn, from: map, prediction: %s}"
    plans = {
        name: plan_workflow(
            load_spec(tiny_spec, [method % name, f"evaluate.prediction={name}"]).spec, "d"
        )
        for name in ("linearized_probit", "closed_form")
    }
    old, new = plans["linearized_probit"], plans["closed_form"]
    kinds = ("fit", "curvature", "evaluate")
    cells = [name for name, stage in old.stages.items() if stage.kind in kinds]
    assert cells and all(old.stages[name].key == new.stages[name].key for name in cells)
    fit = new.stages["fit/laplace_cf/T=1/seed=0"]
    assert fit.config["method"]["prediction"] == "linearized_probit"
    evaluation = new.stages["evaluate/laplace_cf/T=1/seed=0"]
    assert evaluation.config["evaluate"]["prediction"] == "linearized_probit"


def test_the_descriptions_say_what_each_predictive_computes() -> None:
    """`linearized` is said to sample; `closed_form` names both tasks' predictives."""
    method = METHODS.get("laplace_diag_ggn").spec
    for description in (method.model_fields["prediction"].description,
                        EvaluateSpec.model_fields["prediction"].description):
        assert description is not None
        assert "`linearized` also samples" in description or "so it samples too" in description
        assert "`closed_form`" in description and "probit" in description
        assert "N(f, J Sigma J^T + noise_sd^2)" in description
        assert "former name of `closed_form`" in description
