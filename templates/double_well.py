# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # The double well: optimisation, one chain and many chains on a bimodal posterior
#
# Figure 2 of "Scalable Bayesian learning with posteriors" (Duffield et al., ICLR 2025):
# parallel SGHMC is a deep ensemble made asymptotically unbiased. On a two-dimensional
# target with two modes, the ensemble's members land on the modes without spread, one
# serial chain explores the mode it starts in, and many chains run at once cover both
# modes with their spread. Every fit is an MLflow child run, named after its cell, of the run this report is logged to.

# %% tags=["parameters"]
bundle = ""  # folder of the run's results (bayesflow.report.bundle), written for this report
workflow = ""  # name of the workflow
spec_yaml = ""  # the resolved workflow spec, as YAML text
plots = []  # unused: this report draws its own figures
tracking_uri = ""  # where the runs are logged (shown, not read)
run_info = {}  # version, commit, date rendered, machine and device (the report stage's)

# %%
# %matplotlib inline
import functools

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from bayesflow.report import bundle as bundles
from bayesflow.report import experiments, figures, sections

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
methods = spec.get("methods") or {}
barrier = float((spec.get("model") or {}).get("barrier", 4.0))
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which method covers the two-mode target best: the lowest kernelised Stein discrepancy
# of its states against the target (optimisers, whose target is a point, have none), and
# whether the next can be told apart from it across seeds. The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "ksd")))

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))

# %% [markdown]
# ## Trajectories and samples over the density (the paper's Figure 2)
#
# The grey contours are the tempered target
# $p_T(\theta) \propto \exp(-(b(\theta_1^2 - 1)^2 + \theta_2^2/2)/T)$. Each colour is one
# chain (one member of the ensemble): its path from its start (open circle), its states
# (dots) and its final state (large dot). The ensemble keeps only its final members.
# A method at $T \to 0$ is drawn over the first temperature's density.


# %%
def chains_of(method: str) -> int:
    """How many chains (members) a method's posterior holds, from its spec."""
    config = methods.get(method) or {}
    return int(config.get("members") or config.get("chains") or 1)


posteriors = data.posteriors()
order = {name: index for index, name in enumerate(methods)}
finished = frame.loc[frame["cell"].isin(list(posteriors))]
first_seed = finished.loc[finished["seed"] == finished["seed"].min()]
temperatures = sorted(first_seed.loc[first_seed["temperature"] > 0, "temperature"].unique()) or [1.0]
for temperature in temperatures:
    cell = first_seed.loc[first_seed["temperature"].isin([temperature, 0.0])]
    cell = cell.sort_values("method", key=lambda column: column.map(order), kind="stable")
    states = {
        row.method: experiments.chain_states(posteriors[row.cell]["samples"], chains_of(row.method))
        for row in cell.itertuples() if "samples" in posteriors[row.cell]
    }
    display(Markdown(f"### T = {temperature:g}"))
    experiments.double_well_panels(
        functools.partial(experiments.double_well_log_density, barrier=barrier, temperature=temperature),
        states,
    )
    plt.show()

# %% [markdown]
# ## How well each method covers the target
#
# - `right_mode_share`: the share of a method's states with $\theta_1 > 0$; the target
#   puts half its mass in each mode, so 0.5 is right.
# - `ksd`: the kernelised Stein discrepancy of the states (at most 1,000, evenly spaced)
#   against the target's score, lower is closer (not computed at $T \to 0$, whose target
#   is a point).
#
# Mean ± standard deviation over seeds.

# %%
shares = []
for row in finished.itertuples():
    arrays = posteriors[row.cell]
    if "samples" in arrays:
        shares.append({"cell": row.cell, "right_mode_share": float((arrays["samples"][:, 0] > 0).mean())})
frame = frame.merge(pd.DataFrame(shares, columns=["cell", "right_mode_share"]), on="cell", how="left")
table = sections.metric_table(frame, ["right_mode_share", "ksd", "fit_seconds", "steps"], list(methods))
display(sections.styled(table))
display(sections.flag_table(frame))

# %% [markdown]
# ## Workflow spec

# %%
display(Markdown(sections.spec_block(spec_yaml)))

# %% [markdown]
# ## Where the runs are

# %%
display(Markdown(sections.run_links(data.parent_run_ids, tracking_uri, frame)))
