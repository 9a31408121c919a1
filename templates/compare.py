# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Comparison of runs
#
# Two or more `bayesflow run`s of a workflow side by side, for example before and after a
# change of prior: how their specs differ, every metric against temperature with one line
# per run and method, and each run's metrics minus the first run's. Rendered by
# `bayesflow report --compare RUN_A RUN_B [...]`; nothing is refitted.

# %% tags=["parameters"]
run_ids = []  # MLflow parent runs of the `bayesflow run`s, the first being the baseline
tracking_uri = ""  # MLflow tracking URI; empty for MLflow's default

# %%
# %matplotlib inline
import string
import warnings

# MLflow imports tqdm, which warns in a kernel without ipywidgets; the report shows no bars.
warnings.filterwarnings("ignore", message="IProgress not found")

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

import bayesflow
from bayesflow.api import run_spec
from bayesflow.report import compare, figures, sections

figures.apply_theme()
uri = tracking_uri or None
labels = list(string.ascii_uppercase[: len(run_ids)])
frames = {label: bayesflow.results(run, tracking_uri=uri) for label, run in zip(labels, run_ids)}
specs = {label: run_spec(run, tracking_uri=uri) for label, run in zip(labels, run_ids)}
frame = compare.comparison_frame(frames)

# %% [markdown]
# ## The answer
#
# Which run's best method and temperature predicts the held-out rows best, and can the
# next run's best be told apart from it across seeds? The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.compare_opening(frames, "test_nll") if "test_nll" in frame.columns
                 else "_No run logged a test NLL: there is no best to name._"))

# %% [markdown]
# ## The runs
#
# Run A is the baseline every difference below is taken against.

# %%
rows = []
for label, run in zip(labels, run_ids):
    spec = sections.read_spec(specs[label])
    finished = frames[label]["status"].eq("FINISHED").sum()
    rows.append({
        "run": label, "MLflow run": run, "workflow": spec.get("name", ""),
        "fits": f"{finished}/{len(frames[label])} finished",
        "methods": ", ".join(spec.get("methods") or []),
    })
display(sections.styled(pd.DataFrame(rows)))
names = {sections.read_spec(text).get("name") for text in specs.values()}
if len(names) > 1:
    display(Markdown(f"_Note: these runs come from different workflows ({', '.join(sections.code(name) for name in names)})._"))

# %% [markdown]
# ## How the specs differ

# %%
for label in labels[1:]:
    difference = compare.spec_difference(specs[labels[0]], specs[label], (labels[0], label))
    display(Markdown(f"### A → {sections.escape(label)}"))
    display(Markdown(sections.fenced(difference, "diff") if difference else "_The resolved specs are identical._"))

# %% [markdown]
# ## Metrics against temperature
#
# A colour per method and a line style per run (solid: A, dashed: B, dotted: C, ...),
# means over seeds. Methods that do not depend on the temperature (T → 0) are horizontal
# lines.

# %%
metrics = compare.comparison_metrics(frame)
for metric in metrics:
    figure, ax = plt.subplots(figsize=(figures.PAGE_FIGURE[0] + figures.LEGEND_WIDTH, figures.PAGE_FIGURE[1]))
    compare.metric_by_run(frame, metric, ax)
    figure.tight_layout()
    plt.show()

# %% [markdown]
# ## Differences
#
# For each method and temperature: run A's mean over seeds, and for each later run its
# mean minus A's (`Δ`). A blank cell: that run has no such fit.

# %%
table = compare.difference_table(frame, metrics)
display(sections.styled(table, precision=4))

# %% [markdown]
# ## Where the runs are

# %%
display(Markdown(sections.run_links(list(run_ids), tracking_uri)))
