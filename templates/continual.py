# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Continual learning: online SGD, Laplace as the next prior, and an offline model
#
# Figures 5 and 6 of "Scalable Bayesian learning with posteriors" (Duffield et al., ICLR
# 2025), at CPU scale: episodes of data arrive in sequence. Online SGD fits each episode
# from the previous parameters and forgets; Laplace-as-prior carries the previous
# episode's (diagonal GGN) Laplace posterior forward as the next prior; the offline model
# refits on everything seen so far. Every fit is an MLflow child run of the run named at
# the end.

# %% tags=["parameters"]
bundle = ""  # folder of the run's results (bayesflow.report.bundle), written for this report
workflow = ""  # name of the workflow
spec_yaml = ""  # the resolved workflow spec, as YAML text
plots = []  # unused: this report draws its own figures
tracking_uri = ""  # where the runs are logged (shown, not read)
run_info = {}  # version, commit, date rendered, machine and device (the report stage's)

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import seaborn as sns
from IPython.display import Markdown, display

from bayesflow.report import bundle as bundles
from bayesflow.report import figures, sections

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
methods = list((spec.get("methods") or {}).keys())
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which method predicts the whole test set best after the last episode (the lowest test
# NLL), and can the next be told apart from it across seeds? The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "test_nll")))

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))

# %% [markdown]
# ## Loss on each episode's test data over training (the paper's Figure 5)
#
# One panel per episode's test data; the x-axis counts the episodes trained on so far.
# A method that forgets sees an episode's loss rise once later episodes arrive. Lines
# are the mean over seeds.

# %%
losses = data.episode_losses()
episodes = int(losses["episode"].max()) + 1 if len(losses) else 0
if episodes:
    grid = sns.relplot(
        data=losses, x="trained on", y="value", hue="method", col="episode", kind="line",
        errorbar="sd", marker="o", col_wrap=min(5, episodes), height=2.8, aspect=1.0,
        hue_order=[m for m in methods if m in set(losses["method"])],
    )
    grid.set_axis_labels("episodes trained on", "test NLL")
    grid.set_titles("episode {col_name} test data")
    plt.show()
else:
    display(Markdown("_No per-episode losses were logged (no `continual` method ran)._"))

# %% [markdown]
# ## Average loss over the episodes seen (the paper's Figure 6)

# %%
seen = data.histories("trace/seen_average_nll")
if not seen.empty:
    seen["trained on"] = seen["step"] + 1
    figure, axis = plt.subplots(figsize=(6.5, 4))
    sns.lineplot(data=seen, x="trained on", y="value", hue="method", errorbar="sd", marker="o", ax=axis,
                 hue_order=[m for m in methods if m in set(seen["method"])])
    axis.set_xlabel("episodes trained on")
    axis.set_ylabel("mean test NLL over the episodes seen")
    figure.tight_layout()
    plt.show()
    last = seen.loc[seen["trained on"] == seen["trained on"].max()]
    summary = last.groupby("method")["value"].agg(["mean", "std"]).reset_index()
    display(sections.styled(summary.rename(columns={"mean": "final average NLL", "std": "sd over seeds"})))

# %% [markdown]
# ## Results on the whole test set after the last episode
#
# Mean ± standard deviation over seeds.

# %%
table = sections.metric_table(frame, ["test_nll", "test_accuracy", "test_ece", "fit_seconds", "steps"], methods)
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
