"""End to end: each shipped experiment workflow, shrunk by overrides to take seconds, runs
through the real command line, MLflow and Jupyter, logs its metrics and renders its report;
``bayesflow report --compare`` renders a comparison of two runs.

The workflows run at once (each in its own folder, store and cache), started by one
module fixture: most of each run is process start-up, MLflow and the report's kernel,
which overlap well."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e
WORKFLOWS = Path(__file__).parents[2] / "workflows"
BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]

# Overrides that keep each workflow's methods and report but make every fit take well
# under a second: one seed, a few epochs, few samples.
OOD_SMALL = [
    "seeds=[0]", "evaluate.n_samples=5",
    "methods.map.epochs=3", "methods.deep_ensemble.epochs=3", "methods.deep_ensemble.members=3",
    "methods.parallel_sghmc.epochs=3", "methods.parallel_sghmc.chains=3",
    "methods.serial_sghmc.epochs=6", "methods.serial_sghmc.burn_in=10", "methods.serial_sghmc.thin=2",
]
PIMA_SMALL = [
    "seeds=[0]", "evaluate.n_samples=10", "evaluate.ksd.max_samples=50",
    "methods.nuts.warmup=30", "methods.nuts.num_samples=50", "methods.map.epochs=30",
    "methods.vi.epochs=2", "methods.sghmc_full_batch.epochs=60", "methods.sghmc_full_batch.burn_in=10",
    "methods.sghmc_batch_32.epochs=2", "methods.sghmc_batch_32.burn_in=5",
    "methods.parallel_sghmc.epochs=10", "methods.parallel_sghmc.chains=20",
    "methods.parallel_sghmc_10000.epochs=2", "methods.parallel_sghmc_10000.chains=50",
]
WELL_SMALL = [
    "evaluate.ksd.max_samples=100", "methods.deep_ensemble.epochs=50",
    "methods.serial_sghmc.epochs=300", "methods.parallel_sghmc.epochs=50",
]


def bayesflow(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line in ``cwd`` and return what it printed."""
    environment = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*BAYESFLOW, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=environment,
        check=False,
    )


def succeeded(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """``result``, after checking that it exited 0 (showing its output if not)."""
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def client(folder: Path) -> Any:
    """An MLflow client on the folder's store."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")


def parents(folder: Path, experiment: str) -> list[str]:
    """The parent runs of ``experiment`` in the folder's store, oldest first."""
    mlflow = client(folder)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name(experiment).experiment_id])
    found = [r for r in runs if r.data.tags.get("bayesflow.role") == "parent"]
    return [r.info.run_id for r in sorted(found, key=lambda r: r.info.start_time)]


def fits(folder: Path, experiment: str, index: int = 0) -> list[Any]:
    """The fit runs of the ``index``-th parent run of ``experiment``."""
    mlflow = client(folder)
    parent = parents(folder, experiment)[index]
    runs = mlflow.search_runs([mlflow.get_experiment_by_name(experiment).experiment_id])
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent]


def report_html(folder: Path, workflow: str) -> str:
    """The text of the one report the folder holds for ``workflow``."""
    (html,) = folder.glob(f"reports/{workflow}/*/report.html")
    return html.read_text()


def workflow(name: str) -> str:
    """The path of a shipped workflow."""
    return str(WORKFLOWS / f"{name}.yaml")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every small run, started at once: ``{name: (folder, future of its results)}``.

    ``ood`` is two runs in one store, the second with another prior and no report, for
    the comparison."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("ood", "pima", "well")}

    def ood() -> list[subprocess.CompletedProcess[str]]:
        first = bayesflow(folders["ood"], "run", workflow("ood_uncertainty"), *OOD_SMALL)
        second = bayesflow(folders["ood"], "run", workflow("ood_uncertainty"), *OOD_SMALL,
                           "prior.variance=2.0", "report.enabled=false")
        return [first, second]

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures: dict[str, Future[Any]] = {
            "ood": pool.submit(ood),
            "pima": pool.submit(bayesflow, folders["pima"], "run", workflow("pima_logistic"), *PIMA_SMALL),
            "well": pool.submit(bayesflow, folders["well"], "run", workflow("double_well"), *WELL_SMALL),
        }
        yield {name: (folders[name], future) for name, future in futures.items()}


def test_ood_workflow_logs_aurocs_and_uncertainties(launched: Any) -> None:
    """Every fit logs both OOD AUROCs and its per-point uncertainties; MAP's EU is uninformative."""
    folder, future = launched["ood"]
    succeeded(future.result()[0])
    runs = fits(folder, "ood_uncertainty")
    assert sorted(r.data.params["method"] for r in runs) == [
        "deep_ensemble", "map", "parallel_sghmc", "serial_sghmc"
    ]
    for run in runs:
        assert {"ood_auroc_total", "ood_auroc_epistemic"} <= set(run.data.metrics)
    (map_run,) = [r for r in runs if r.data.params["method"] == "map"]
    assert map_run.data.metrics["ood_auroc_epistemic"] == 0.5  # EU = 0 everywhere: chance
    import bayesflow as api

    arrays = api.evaluations(parents(folder, "ood_uncertainty")[0],
                             tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    assert set(arrays) == {r.info.run_id for r in runs}
    assert all("ood_uncertainty_epistemic" in values for values in arrays.values())


def test_ood_report_has_figure_7_and_table_1(launched: Any) -> None:
    """The report embeds the uncertainty densities and tabulates AUROC by method and score."""
    folder, future = launched["ood"]
    succeeded(future.result()[0])
    text = report_html(folder, "ood_uncertainty")
    assert text.count("data:image/png;base64") >= 1
    assert "AUROC (TU)" in text and "AUROC (EU)" in text and "fit/map/T=shared/seed=0" in text
    assert "Traceback" not in text


def test_pima_workflow_logs_ksd_and_reference_errors(launched: Any) -> None:
    """KSD for every sampled fit, distances to NUTS for every other method, and the report."""
    folder, future = launched["pima"]
    succeeded(future.result())
    runs = {r.data.params["method"]: r.data.metrics for r in fits(folder, "pima_logistic")}
    assert set(runs) == {
        "nuts", "map", "laplace", "vi", "sghmc_full_batch", "sghmc_batch_32", "parallel_sghmc",
        "parallel_sghmc_10000",
    }
    for method, metrics in runs.items():
        if method != "map":  # the T → 0 fit has no tempered target
            assert metrics["ksd"] > 0, method
        if method not in ("map", "nuts"):
            assert {"reference_mean_error", "reference_variance_error"} <= set(metrics), method
    assert "reference_mean_error" not in runs["nuts"]
    text = report_html(folder, "pima_logistic")
    assert text.count("data:image/png;base64") >= 1
    assert "ksd" in text and "reference_variance_error" in text and "Traceback" not in text


def test_double_well_workflow_draws_trajectories(launched: Any) -> None:
    """The data-free double well: a KSD for each sampler and the trajectories figure."""
    folder, future = launched["well"]
    succeeded(future.result())
    runs = {r.data.params["method"]: r.data.metrics for r in fits(folder, "double_well")}
    assert set(runs) == {"deep_ensemble", "serial_sghmc", "parallel_sghmc"}
    assert runs["serial_sghmc"]["ksd"] > 0 and runs["parallel_sghmc"]["ksd"] > 0
    assert "test_nll" not in runs["serial_sghmc"]  # a fixed target has no predictive
    text = report_html(folder, "double_well")
    assert text.count("data:image/png;base64") >= 1
    assert "right_mode_share" in text and "Traceback" not in text


def test_compare_report_of_two_runs(launched: Any) -> None:
    """`bayesflow report --compare A B` draws metrics per run and shows the specs' difference."""
    folder, future = launched["ood"]
    for result in future.result():
        succeeded(result)
    ids = parents(folder, "ood_uncertainty")
    succeeded(bayesflow(folder, "report", "--compare", *ids))
    (html,) = folder.glob("reports/compare/*/report.html")
    text = html.read_text()
    assert text.count("data:image/png;base64") >= 4  # one figure per compared metric
    assert "variance: 2.0" in text and "Δ test_nll [B]" in text
    assert text.index("The answer") < text.index("The runs") and "Best: run " in text
    assert bayesflow(folder, "report", "--compare", ids[0]).returncode == 2


TWINS = """\
name: twins
data: {name: sklearn_digits, test_fraction: 0.5}
model: {name: mlp, hidden: [8]}
likelihood: {name: categorical}
prior: {name: diag_normal, variance: 1.0}
temperatures: [1.0]
seeds: [0]
methods:
  a: {engine: sghmc, lr: 0.01, epochs: 2, chains: 2, keep: last}
  b: {engine: sghmc, lr: 0.01, epochs: 2, chains: 2, keep: last}
evaluate: {n_samples: 4}
plots: [nll_vs_temperature]
"""


def test_equal_methods_under_two_names_keep_both_rows(tmp_path: Path) -> None:
    """Methods `a` and `b` with equal settings are fitted once, yet each has its child run,
    its row in the results and its line in the report."""
    (tmp_path / "twins.yaml").write_text(TWINS)
    result = succeeded(bayesflow(tmp_path, "run", "twins.yaml"))
    printed = result.stdout + result.stderr
    assert "done   fit/a/T=1/seed=0" in printed and "fit/b/T=1/seed=0 (" not in printed
    runs = fits(tmp_path, "twins")
    assert sorted(run.data.params["method"] for run in runs) == ["a", "b"]
    assert all("test_nll" in run.data.metrics for run in runs)
    import bayesflow as api

    frame = api.results(parents(tmp_path, "twins")[0], tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(frame["method"]) == ["a", "b"] and frame["test_nll"].nunique() == 1
    text = report_html(tmp_path, "twins")
    assert "fit/a/T=1/seed=0" in text and "fit/b/T=1/seed=0" in text and "Traceback" not in text


def test_continual_workflow_draws_figures_5_and_6(tmp_path: Path) -> None:
    """The continual workflow logs per-episode losses and renders both figures."""
    succeeded(bayesflow(tmp_path, "run", workflow("continual"), "seeds=[0]", "data.episodes=2",
                        "methods.online_sgd.epochs=3", "methods.laplace_prior.epochs=3",
                        "methods.offline.epochs=3"))
    html = report_html(tmp_path, "continual")
    assert html.count("data:image/png;base64") >= 2
    assert "final average NLL" in html
    runs = fits(tmp_path, "continual")
    assert {run.data.params["method"] for run in runs} == {"online_sgd", "laplace_prior", "offline"}
    history = client(tmp_path).get_metric_history(runs[0].info.run_id, "trace/seen_average_nll")
    assert len(history) == 2
