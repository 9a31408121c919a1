# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Bayesian LoRA on multiple-choice questions
#
# A language model's LoRA adapters fitted by several methods on multiple-choice questions
# (`data: {name: multiple_choice}`, `likelihood: multiple_choice`), evaluated as
# Laplace-LoRA (Yang et al., ICLR 2024) and BLoB (Wang et al., NeurIPS 2024) report them:
# accuracy, expected calibration error and negative log likelihood of the posterior
# predictive on the test questions (their Table 1) and on questions under distribution
# shift, the reliability of the predicted probabilities, and how calibration moves with the
# posterior temperature. Every fit is an MLflow child run, named after its cell, of the run
# this report is logged to.

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
from IPython.display import Markdown, display

from bayesflow.report import bundle as bundles
from bayesflow.report import choices, figures, sections

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
order = list(spec.get("methods") or [])
bins = int((spec.get("evaluate") or {}).get("ece_bins", 10))
shifts = choices.shift_sets(frame)
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which method and temperature give the lowest NLL on the test questions, and can the
# runner-up be told apart from it across seeds? Then the same for the expected
# calibration error. The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "test_nll")))
if "test_ece" in frame.columns:
    display(Markdown("**By calibration (ECE).** " + answer.opening(frame, "test_ece")))

# %% [markdown]
# ## The metrics
#
# Each method's posterior predictive is the mean of the members' probabilities over the
# choices (one member for a point estimate). **Accuracy**: the share of questions whose
# most probable choice is the answer. **ECE**: the questions binned by that largest
# probability (equal-width bins), the gap between accuracy and mean confidence in each
# bin, weighted by its share. **NLL**: the mean of −log of the answer's probability.
# Each cell is the mean over seeds ± the standard deviation (one seed: the value alone).

# %%
display(Markdown(f"ECE over {bins} equal-width bins. Shift sets: "
                 + (", ".join(f"`{name}`" for name in shifts) if shifts else "none in this run") + "."))

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))

# %% [markdown]
# ## Table 1: the test questions
#
# One block of rows per temperature; `shared` marks the fits that do not depend on it
# (MAP, ensembles).

# %%
table = choices.choice_table(frame, choices.TEST_SET, order)
display(sections.styled(table) if not table.empty else Markdown("_No fit logged test metrics._"))

# %% [markdown]
# ## Under distribution shift
#
# The same table for each shift set named in `data.shift`, under the same posterior
# members as the test questions, and the AUROC of telling the set's questions from the
# test questions by the total uncertainty (entropy of the predictive) and by the
# epistemic uncertainty (the mutual information; 0.5 is chance, and always for one member).

# %%
if not shifts:
    display(Markdown("_The data name no shift sets (`data.shift`)._"))
for name in shifts:
    display(Markdown(f"### `{sections.escape(name)}`"))
    display(sections.styled(choices.choice_table(frame, name, order)))
    aurocs = choices.auroc_table(frame, name, order)
    if not aurocs.empty:
        display(sections.styled(aurocs))

# %% [markdown]
# ## Reliability
#
# Accuracy against confidence over the questions of every fit at each temperature, seeds
# pooled, one panel per set: a calibrated predictive lies on the diagonal, one above it is
# under-confident, one below it over-confident. Each point's area is its bin's share of
# the questions.

# %%
long = choices.reliability_frame(frame, data.evaluations())
if long.empty:
    display(Markdown("_No fit saved per-question probabilities._"))
else:
    temperatures = [t for t in long["temperature"].unique() if t != choices.SHARED] or [choices.SHARED]
    for temperature in temperatures:
        choices.reliability_diagram(long, temperature, bins, order)
        plt.show()

# %% [markdown]
# ## The cold-posterior curve
#
# ECE and NLL on the test questions (and each shift set) against the posterior
# temperature: sampled methods as mean ± 1 sd over seeds, temperature-free fits as dashed
# lines.

# %%
curves = [metric for name in [choices.TEST_SET, *shifts] for metric in
          (choices.set_metric("ece", name), choices.set_metric("nll", name)) if metric in frame.columns]
for metric in curves:
    figure, axis = plt.subplots(figsize=figures.PAGE_FIGURE)
    figures.metric_vs_temperature(frame, metric, ax=axis)
    axis.set_title(metric)
    plt.show()

# %% [markdown]
# ## Results
#
# Every summary metric, mean ± standard deviation over the seeds that finished.

# %%
results = sections.metric_table(frame, list(figures.TABLE_METRICS), order)
display(sections.styled(results))
display(sections.flag_table(frame))

# %% [markdown]
# ## Workflow spec

# %%
display(Markdown(sections.spec_block(spec_yaml)))

# %% [markdown]
# ## Where the runs are

# %%
display(Markdown(sections.run_links(data.parent_run_ids, tracking_uri, frame)))
