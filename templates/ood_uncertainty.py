# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Out-of-distribution detection by epistemic uncertainty
#
# The experiment of Section 5.3 of "Scalable Bayesian learning with posteriors"
# (Duffield et al., ICLR 2025): can the uncertainty of a posterior tell inputs unlike the
# training data apart? Every fit is an MLflow child run, named after its cell, of the run this report is logged to.

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
from bayesflow.report import experiments, figures, sections

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which posterior's epistemic uncertainty best tells out-of-distribution inputs from the
# test inputs (the highest AUROC of EU), and can the next be told apart from it across
# seeds? The evidence follows.

# %%
from bayesflow.report import answer

display(Markdown(answer.opening(frame, "ood_auroc_epistemic", higher=True)))

# %% [markdown]
# ## The uncertainty decomposition
#
# For a test input $x$ and $S$ posterior samples $\theta_s$, with
# $\bar p(y \mid x) = \frac1S \sum_s p(y \mid x, \theta_s)$ (in nats):
#
# - total uncertainty $\mathrm{TU}(x) = H[\bar p(y \mid x)]$,
# - aleatoric uncertainty $\mathrm{AU}(x) = \frac1S \sum_s H[p(y \mid x, \theta_s)]$,
# - epistemic uncertainty $\mathrm{EU}(x) = \mathrm{TU}(x) - \mathrm{AU}(x)$, the mutual
#   information of the label and the parameters.
#
# An optimiser (MAP) has one parameter vector, so its EU is 0 everywhere: only TU can
# flag an input as out of distribution. The paper's claim is that the EU of a posterior
# (an ensemble, parallel or serial SGHMC) separates in- from out-of-distribution inputs.

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))

# %% [markdown]
# ## Uncertainty on in- and out-of-distribution inputs (the paper's Figure 7)
#
# Densities of TU (top) and EU (bottom) over the test inputs of the training classes
# (in-distribution) and the inputs of the held-out classes (out-of-distribution), one
# column per method, seeds pooled. Separated histograms mean a good OOD score.

# %%
arrays = data.evaluations()
long = experiments.uncertainty_frame(frame, arrays)
if long.empty:
    display(Markdown("_No fit logged OOD uncertainties: does the data hold OOD inputs "
                     "(`data.holdout_classes`)?_"))
for temperature in sorted(long.loc[long["temperature"] > 0, "temperature"].unique()) or [None]:
    shown = long if temperature is None else long.loc[
        (long["temperature"] == temperature) | (long["temperature"] == 0)
    ]
    if shown.empty:
        continue
    if temperature is not None:
        display(Markdown(f"### T = {temperature:g} (and the T → 0 methods)"))
    experiments.uncertainty_distributions(shown, order=list(spec.get("methods") or []))
    plt.show()

# %% [markdown]
# ## OOD detection: AUROC by method and score (the paper's Table 1)
#
# The area under the ROC curve of TU and of EU used as a score that should be higher on
# out-of-distribution inputs (0.5 is chance, 1 a perfect separation), mean ± standard
# deviation over seeds, next to the in-distribution test metrics.

# %%
table = sections.metric_table(
    frame, ["ood_auroc_total", "ood_auroc_epistemic", "test_accuracy", "test_nll"],
    list(spec.get("methods") or []),
).rename(columns={"ood_auroc_total": "AUROC (TU)", "ood_auroc_epistemic": "AUROC (EU)"})
display(sections.styled(table))

# %% [markdown]
# ## Results
#
# Every summary metric, mean ± standard deviation over the seeds that finished.

# %%
results = sections.metric_table(frame, list(figures.TABLE_METRICS), list(spec.get("methods") or []))
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
