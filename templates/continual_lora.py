# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Continual LoRA on a language model: online AdamW, Laplace as the next prior, offline
#
# Section 5.2 of "Scalable Bayesian learning with posteriors" (Duffield et al., ICLR 2025),
# Figures 5 and 6: LoRA adapters of a pretrained causal language model are fine-tuned on a
# stream of documents, one document per episode, the last part of each held out. Online
# AdamW fits each episode from the previous adapters and forgets the earlier documents;
# Laplace-as-prior makes the previous episode's diagonal Laplace posterior (the empirical
# Fisher over scored tokens, weighted by λ) the next episode's prior; the offline model
# refits on every document seen so far. The single-episode baseline fits each document
# alone from the pretrained model. Losses are nats per scored token. Every fit is an
# MLflow child run of the run named at the end.

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
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from bayesflow.report import bundle as bundles
from bayesflow.report import figures, sections

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
declared = spec.get("methods") or {}
baselines = [name for name, method in declared.items() if (method or {}).get("continual") == "single"]
methods = [name for name in declared if name not in baselines]
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which method predicts every episode's held-out text best after the last episode (the
# lowest test NLL per token), and can the next be told apart from it across seeds? The
# evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "test_nll")))

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))
strengths = {name: (method or {}).get("laplace_strength") for name, method in declared.items()
             if (method or {}).get("continual") == "laplace_prior"}
if strengths:
    display(Markdown("Laplace-as-prior strength λ: " + ", ".join(
        f"`{name}` λ = {1 if value is None else value:g}" for name, value in strengths.items())))

# %%
losses = data.episode_losses()
episodes = int(losses["episode"].max()) + 1 if len(losses) else 0
# The single-episode baseline of episode j: its test loss once fitted on episode j alone.
reference = losses[losses["method"].isin(baselines) & (losses["step"] == losses["episode"])]
reference = reference.groupby(["seed", "episode"])["value"].mean().rename("baseline").reset_index()

# %% [markdown]
# ## Loss on each episode's test data as training moves through the episodes (Figure 5)
#
# One panel per episode's held-out text; the x-axis counts the episodes trained on so far,
# the panel's own episode is the shaded one. A method that forgets sees a panel's loss rise
# after its episode; the dotted line is the single-episode baseline of that episode. Lines
# are the mean over seeds.

# %%
shown = losses[losses["method"].isin(methods)]
if not shown.empty:
    grid = sns.relplot(
        data=shown, x="trained on", y="value", hue="method", col="episode", kind="line",
        errorbar="sd", marker="o", col_wrap=min(4, episodes), height=2.8, aspect=1.1,
        hue_order=[m for m in methods if m in set(shown["method"])],
    )
    for episode, axis in grid.axes_dict.items():
        axis.axvspan(episode + 0.5, episode + 1.5, color="0.9", zorder=0)
        level = reference.loc[reference["episode"] == episode, "baseline"]
        if not level.empty:
            axis.axhline(float(level.mean()), color="0.3", linestyle=":", linewidth=1)
    grid.set_axis_labels("episodes trained on", "test NLL per token")
    grid.set_titles("episode {col_name} test text")
    plt.show()
else:
    display(Markdown("_No per-episode losses were logged (no `continual` method ran)._"))

# %% [markdown]
# ## Average over the episodes seen, relative to the single-episode baseline (Figure 6)
#
# After training on k episodes: the mean over episodes j ≤ k of (the method's loss on j
# now − the loss on j of a model fitted on j alone). Zero is as good as a specialist of
# every episode seen; below zero the episodes help each other, above it the method forgets
# or cannot learn the new episode.

# %%
if not shown.empty and not reference.empty:
    seen = shown[shown["episode"] <= shown["step"]].merge(reference, on=["seed", "episode"])
    seen["excess"] = seen["value"] - seen["baseline"]
    relative = seen.groupby(["method", "seed", "trained on"])["excess"].mean().reset_index()
    figure, axis = plt.subplots(figsize=(6.5, 4))
    sns.lineplot(data=relative, x="trained on", y="excess", hue="method", errorbar="sd", marker="o",
                 ax=axis, hue_order=[m for m in methods if m in set(relative["method"])])
    axis.axhline(0.0, color="0.3", linestyle=":", linewidth=1)
    axis.set_xlabel("episodes trained on")
    axis.set_ylabel("mean test NLL over episodes seen\n− single-episode baseline")
    figure.tight_layout()
    plt.show()
elif not shown.empty:
    display(Markdown("_No single-episode baseline ran (a method with `continual: single`); "
                     "Figure 6 needs it._"))

# %% [markdown]
# ## After the last episode
#
# Per method, the mean over seeds of: the average test loss over all episodes; the loss on
# the first episode's text; forgetting, the mean over every episode but the last of (its
# loss now − its loss right after it was trained on); and the same average relative to the
# single-episode baseline.

# %%
if not shown.empty:
    final = shown[shown["step"] == shown["step"].max()]
    own = shown[shown["step"] == shown["episode"]][["method", "seed", "episode", "value"]]
    drift = final.merge(own, on=["method", "seed", "episode"], suffixes=("", "_then"))
    drift = drift[drift["episode"] < drift["step"]]
    rows = {
        "average NLL": final.groupby(["method", "seed"])["value"].mean(),
        "episode 0 NLL": final[final["episode"] == 0].groupby(["method", "seed"])["value"].mean(),
        "forgetting": (drift["value"] - drift["value_then"]).groupby([drift["method"], drift["seed"]]).mean(),
    }
    if not reference.empty:
        versus = final.merge(reference, on=["seed", "episode"])
        rows["vs single-episode"] = (versus["value"] - versus["baseline"]).groupby(
            [versus["method"], versus["seed"]]).mean()
    summary = pd.DataFrame(rows).groupby("method").mean()
    summary = summary.reindex([m for m in methods if m in summary.index]).reset_index()
    display(sections.styled(summary))

# %% [markdown]
# ## Results on every episode's test text after the last episode
#
# Mean ± standard deviation over seeds.

# %%
table = sections.metric_table(frame, ["test_nll", "test_accuracy", "fit_seconds", "steps"],
                              methods + baselines)
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
