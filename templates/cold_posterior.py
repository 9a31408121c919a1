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
# `bayesflow run`, compared on held-out data. Every fit is an MLflow child run, named
# after its cell, of the run this report is logged to.

# %% tags=["parameters"]
bundle = ""  # folder of the run's results (bayesflow.report.bundle), written for this report
workflow = ""  # name of the workflow
spec_yaml = ""  # the resolved workflow spec, as YAML text
plots = None  # figures to draw (the spec's `plots`); None: those the results have metrics for
tracking_uri = ""  # where the runs are logged (shown, not read)
run_info = {}  # version, commit, date rendered, machine and device (the report stage's)

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import seaborn as sns
from IPython.display import Markdown, display

from bayesflow.report import bundle as bundles
from bayesflow.report import figures, sections, tables

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
metrics = tables.summary_metrics(frame)  # NLL with accuracy, ECE, Brier or with RMSE, coverage

display(Markdown(sections.header(workflow, spec_yaml, run_info)))
language_model = (sections.read_spec(spec_yaml).get("model") or {}).get("name") == "causal_lm"
if language_model:
    display(Markdown(
        "_A causal language model: every scored token of every held-out window is one point, so "
        "the test NLL, accuracy, ECE and Brier score are per scored token (`test_perplexity` = "
        "exp(test NLL)); the data are text windows, with no features to plot._"
    ))

# %% [markdown]
# ## The answer
#
# Which method and temperature predict the held-out rows best, and can the runner-up be
# told apart from it across seeds? The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "test_nll")))

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
display(Markdown(sections.what_ran(frame)))
failed = figures.failed_cells(frame)
if not failed.empty:
    display(Markdown("**Failed fits** (left out of the means, marked × in the figures):"))
    shown = [c for c in ["variant", "method", "engine", "temperature", "seed", "status", "error"] if c in failed]
    display(sections.styled(failed[shown]))

# %% [markdown]
# ## Best temperature per method

# %%
text, best = sections.best_temperature(frame)
display(Markdown(text))
if not best.empty:
    display(sections.styled(best))

# %% [markdown]
# ## Evidence-chosen priors
#
# Wenzel et al. (2020) ask whether a cold posterior compensates for a poor prior. The
# Laplace evidence
#
# $$\log p(D) \approx \log p(D \mid \theta^*) + \log p(\theta^*) + \tfrac{d}{2}\log 2\pi - \tfrac12 \log\det\Lambda$$
#
# chooses the prior by the data alone (empirical Bayes); a Laplace method with
# `prior_variance: auto` uses that prior.

# %%
from bayesflow.report import evidence

text, by_evidence = evidence.evidence_section(frame)
display(Markdown(text))
if not by_evidence.empty:
    display(sections.styled(by_evidence))

# %% [markdown]
# ## Metrics against temperature
#
# Lines are the mean over seeds, bands ±1 standard deviation.

# %%
drawable = figures.drawable_plots(frame, plots)
for name in drawable:
    display(Markdown(f"### {sections.escape(figures.metric_label(figures.plot_metric(name, frame)))}"))
    figure, ax = plt.subplots(figsize=figures.PAGE_FIGURE)
    figures.plot(name, frame, ax=ax)
    plt.show()
skipped = [name for name in plots or [] if name not in drawable]
if skipped:
    display(Markdown("_Not drawn, no fit logged their metric: " + ", ".join(map(sections.code, skipped)) + "._"))
if not drawable:
    display(Markdown("_No figure: the spec lists no plots._" if plots == [] else "_No metric against temperature to draw._"))

# %% [markdown]
# ## Results
#
# Mean ± standard deviation over the seeds that finished; `finished` counts them.

# %%
display(sections.styled(figures.results_table(frame, metrics)))
display(sections.flag_table(frame))

# %% [markdown]
# ## Differences across seeds

# %%
from bayesflow.report import differences

text, by_temperature, at_best = differences.section(frame, "test_nll")
display(Markdown(text))
if not by_temperature.empty:
    display(Markdown("**At each temperature.** " + sections.escape(differences.summary(by_temperature))))
    display(sections.styled(by_temperature))
if not at_best.empty:
    display(Markdown("**At each method's best temperature** (those of the best-temperature table; "
                     "a choice made on the test split makes these gaps optimistic). "
                     + sections.escape(differences.summary(at_best))))
    display(sections.styled(at_best))

# %%
# Along the swept keys: only for a sweep over spec keys (`bayesflow run spec.yaml -m ...`).
text, by_variant = sections.swept_keys(frame)
if not by_variant.empty:
    display(Markdown("## Along the swept keys\n\n" + text))
    display(sections.styled(by_variant))

# %% [markdown]
# ## Sampler diagnostics
#
# For SG-MCMC fits at $T > 0$: the **kinetic temperature** of the final momenta and the
# **configurational temperature** $\langle\theta\cdot\nabla U(\theta)\rangle/d$ of the final
# parameters, each as a ratio to the temperature the sampler should have (Wenzel et al.,
# 2020, Section 4; 1 is right; above 1 the parameters are spread too widely, between 0 and
# 1 too narrowly, and below 0 the chain has not reached the region the posterior holds:
# the log posterior still rises as its weights move on, so it is not yet sampling), the share of parameter tensors whose kinetic temperature
# lies in its 99% $\chi^2$ interval, and, for several chains that keep every sample, split
# R-hat and the effective sample size of the log posterior (approximate for SG-MCMC);
# for chains grouped in superchains that share a start (`chains_per_start`), nested R-hat
# (Margossian et al., 2024; below 1.01 the superchains agree).
# Below, per epoch: the training loss (negative per-datum log posterior), the kinetic
# temperature ratio and, for a schedule that varies it, the step size.

# %%
diagnostic_columns = [
    column for column in [
        "kinetic_temperature_ratio", "kinetic_temperature_fraction_inside",
        "configurational_temperature_ratio", "rhat/log_posterior", "ess/log_posterior",
        "nested_rhat/log_posterior", "nested_rhat_max",
    ] if column in frame.columns
]
if diagnostic_columns:
    samplers = frame.dropna(subset=[diagnostic_columns[0]])
    # "—" where a finished fit has no such number (one chain: no R-hat; no superchains: no nested R-hat)
    display(sections.styled(sections.metric_table(samplers, diagnostic_columns)))
    display(Markdown(sections.configurational_note(samplers)))
else:
    display(Markdown("_No sampler diagnostics were logged (no SG-MCMC fit at T > 0)._"))
style = "variant" if tables.variants(frame) else None


def with_variant(series):
    """A history with each cell's sweep variant, to draw a line style per variant."""
    return series.merge(frame[["cell", "variant"]], on="cell", how="left") if style else series


def seed_means(series, lines=("method", "temperature", "variant")):
    """The mean of each line (by default over seeds) at each step: what seaborn's line
    estimator draws, computed in one pass instead of one call per step."""
    keys = [key for key in (*lines, "step") if key in series]
    return series.groupby(keys, as_index=False, dropna=False, sort=False)["value"].mean()


traces = with_variant(data.histories("train_loss"))
# one-pass methods (Laplace) have no trace worth drawing
traces = traces[traces.groupby("cell")["step"].transform("size") > 1]
if not traces.empty:
    grid = sns.relplot(
        data=seed_means(traces), x="step", y="value", hue="temperature", col="method", kind="line",
        style=style, estimator=None, col_wrap=min(3, traces["method"].nunique()), height=3, aspect=1.3, palette="viridis",
        facet_kws={"sharey": False},
    )
    grid.set_axis_labels("epoch", "training loss")
    plt.show()
kinetic = with_variant(data.histories("trace/kinetic_temperature_ratio"))
if not kinetic.empty:
    grid = sns.relplot(
        data=seed_means(kinetic), x="step", y="value", hue="temperature", col="method", kind="line",
        style=style, estimator=None, col_wrap=min(3, kinetic["method"].nunique()), height=3, aspect=1.3, palette="viridis",
    )
    grid.set_axis_labels("epoch", "kinetic temperature / target")
    for axis in grid.axes.flat:
        axis.axhline(1.0, color="black", linestyle=":", linewidth=1)
    plt.show()
steps = data.histories("trace/step_size")
if not steps.empty and steps["value"].nunique() > 1:  # a constant step size says nothing
    grid = sns.relplot(
        data=seed_means(steps, ("method",)), x="step", y="value", col="method", kind="line", estimator=None,
        col_wrap=min(3, steps["method"].nunique()), height=3, aspect=1.3,
    )
    grid.set_axis_labels("epoch", "step size")
    plt.show()

# %% [markdown]
# ## Out-of-distribution detection
#
# When the data hold out-of-distribution inputs: the AUROC of total (TU) and epistemic
# (EU) uncertainty as scores separating them from the test inputs (the posteriors paper,
# Table 1; 0.5 is chance).

# %%
ood_columns = [c for c in frame.columns if c.startswith("ood_auroc")]
if ood_columns:
    display(sections.styled(figures.results_table(frame, ood_columns)))
else:
    display(Markdown("_This workflow has no out-of-distribution inputs._"))

# %% [markdown]
# ## Agreement with the reference
#
# With `evaluate.reference`: how close each fit's predictive distribution comes to the
# reference's (a long sampler run of the study, or a file of reference probabilities),
# by the scores of the NeurIPS 2021 approximate inference competition.

# %%
spec = sections.read_spec(spec_yaml)
text, agreement = sections.reference_agreement(frame, spec, list(spec.get("methods") or []))
if not agreement.empty:
    display(Markdown(text))
    display(sections.styled(agreement))
else:
    display(Markdown("_No `evaluate.reference` is set, or no fit was compared with it._"))

# %% [markdown]
# ## Prior predictive check
#
# Wenzel et al. (2020, Section 5): draw networks from the prior and look at the class
# probabilities they give the test inputs. A prior under which each draw sends almost
# every input to one class (majority fraction near 1 with confident probabilities) is a
# poor prior for the task.

# %%
check = data.prior_predictive()
if check is not None:
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    sns.histplot(check["majority_fraction"], bins=20, ax=axes[0])
    axes[0].set_xlabel("share of test inputs in the draw's most frequent class")
    sns.histplot(check["max_probability"], bins=20, ax=axes[1])
    axes[1].set_xlabel("mean top-class probability of the draw")
    for axis in axes:
        axis.set_ylabel("prior draws")
    figure.tight_layout()
    plt.show()
elif language_model:
    display(Markdown("_No prior predictive check: a language model's frozen weights are not drawn from a prior._"))
else:
    display(Markdown("_The prior predictive check was not run (`evaluate.prior_predictive: true`)._"))

# %% [markdown]
# ## Workflow spec

# %%
display(Markdown(sections.spec_block(spec_yaml)))

# %% [markdown]
# ## Where the runs are

# %%
display(Markdown(sections.run_links(data.parent_run_ids, tracking_uri, frame)))
