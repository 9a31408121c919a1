# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Tempered posterior report
#
# Inference methods fitted at a grid of posterior temperatures and seeds by
# `bayesflow run`, compared on held-out data. Every fit is an MLflow child run of the
# run named at the end of this report.

# %% tags=["parameters"]
run_id = ""  # MLflow parent run of the `bayesflow run`
tracking_uri = ""  # MLflow tracking URI; empty for MLflow's default
workflow = ""  # name of the workflow
spec_yaml = ""  # the resolved workflow spec, as YAML text
plots = ["nll_vs_temperature", "accuracy_vs_temperature"]
results_csv = ""  # when set, read the results from this CSV instead of MLflow

# %%
# %matplotlib inline
import warnings

# MLflow imports tqdm, which warns in a kernel without ipywidgets; the report shows no bars.
warnings.filterwarnings("ignore", message="IProgress not found")

import matplotlib.pyplot as plt
import pandas as pd
import yaml
from IPython.display import Markdown, display

from bayesflow.report import figures

figures.apply_theme()

if results_csv:
    frame = pd.read_csv(results_csv)
else:
    import bayesflow

    frame = bayesflow.results(run_id, tracking_uri=tracking_uri or None)

try:
    spec = yaml.safe_load(spec_yaml) if spec_yaml else {}
except yaml.YAMLError:
    spec = {}
description = spec.get("description", "") if isinstance(spec, dict) else ""
lines = [f"**Workflow:** `{workflow or 'unnamed'}`"]
if description:
    lines.append(str(description).strip())
display(Markdown("\n\n".join(lines)))

# %% [markdown]
# ## The temperature convention
#
# A method at temperature $T$ targets the tempered posterior
# $p_T(\theta \mid D) \propto \exp(-U(\theta)/T)$ with
# $U(\theta) = -\sum_i \log p(y_i \mid x_i, \theta) - \log p(\theta)$: the likelihood
# **and** the prior are tempered (unless the spec chose
# `temperature_convention: likelihood`). $T = 1$ is the Bayes posterior; $T < 1$ is a
# "cold" posterior, more concentrated around the modes; $T \to 0$ is optimisation, the
# MAP estimate, drawn here as dashed horizontal reference lines (optimisers do not
# depend on $T$). Wenzel et al. (2020, "How good is the Bayes posterior in deep neural
# networks really?") found that cold posteriors often predict better than the Bayes
# posterior in deep networks: the *cold posterior effect*. Temperatures are plotted on a
# log scale; the dotted vertical line marks $T = 1$.

# %% [markdown]
# ## What ran

# %%
failed = figures.failed_cells(frame)
sampled = frame.loc[frame["temperature"] > 0]
summary = [
    f"- **{len(frame)}** fits: **{len(frame) - len(failed)}** finished, **{len(failed)}** failed",
    f"- methods: {', '.join(f'`{method}`' for method in pd.unique(frame['method']))}",
    "- temperatures: "
    + ", ".join(f"{value:g}" for value in sorted(pd.unique(sampled["temperature"]))),
    f"- seeds: {', '.join(str(seed) for seed in sorted(pd.unique(frame['seed'])))}",
]
display(Markdown("\n".join(summary)))
if not failed.empty:
    display(Markdown("**Failed fits** (left out of the means, marked × in the figures):"))
    display(
        failed[["method", "engine", "temperature", "seed", "status", "run_id"]].style.hide(
            axis="index"
        )
    )

# %% [markdown]
# ## Metrics against temperature
#
# Lines are the mean over seeds, bands ±1 standard deviation.

# %%
for name in plots:
    metric = figures.PLOT_METRICS.get(name, name)
    display(Markdown(f"### {figures.METRIC_LABELS.get(metric, name)}"))
    figure, ax = plt.subplots(figsize=(7, 4.5))
    figures.plot(name, frame, ax=ax)
    plt.show()

# %% [markdown]
# ## Results
#
# Mean ± standard deviation over the seeds that finished; `finished` counts them.

# %%
display(figures.results_table(frame).style.hide(axis="index").format({"temperature": "{:g}"}))

# %% [markdown]
# ## Workflow spec

# %%
if spec_yaml:
    display(Markdown(f"```yaml\n{spec_yaml.rstrip()}\n```"))
else:
    display(Markdown("_No spec was passed to this report._"))

# %% [markdown]
# ## Where the runs are

# %%
store = f"`{tracking_uri}`" if tracking_uri else "MLflow's default (`sqlite:///mlflow.db`)"
display(
    Markdown(
        f"- MLflow run: `{run_id or 'not given'}`\n"
        f"- tracking URI: {store}\n"
        "- to browse every fit, its parameters and artifacts (`posterior/posterior.npz`), "
        "run `bayesflow ui` in the workflow's folder, or "
        f"`mlflow ui --backend-store-uri {tracking_uri or 'sqlite:///mlflow.db'}`"
    )
)
