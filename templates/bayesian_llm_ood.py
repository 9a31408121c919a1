# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # A Bayesian language model for out-of-distribution detection
#
# The "Bayesian Llama 3" experiment of Section 5.3 of "Scalable Bayesian learning with
# posteriors" (Duffield et al., ICLR 2025), in the layout of its Tables 1 and 2 and
# Figures 7 and 10: a language model's last decoder layer is fine-tuned by several
# methods, each completes the last word of statements in distribution and out of it, and
# the question is whether the epistemic uncertainty of a posterior tells the two apart.
# Every fit is an MLflow child run, named after its cell, of the run this report is
# logged to.

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
from bayesflow.report import statements as statement_report

figures.apply_theme()
data = bundles.open(bundle)
frame = data.results()
spec = sections.read_spec(spec_yaml)
order = list(spec.get("methods") or [])
settings = (spec.get("evaluate") or {}).get("statements") or {}
display(Markdown(sections.header(workflow, spec_yaml, run_info)))

# %% [markdown]
# ## The answer
#
# Which method's epistemic uncertainty best tells the out-of-distribution statements
# apart (the highest AUROC of EU per statement), and can the next be told apart from it
# across seeds? The evidence follows.

# %%
from bayesflow.report import answer

chosen_sets = settings.get("ood", "cipher")
for set_name in (["ood"] if isinstance(chosen_sets, str) else list(chosen_sets)):
    metric = "statements_auroc_eu" if set_name == "ood" else f"statements_auroc_eu_{set_name}"
    lead = "" if set_name == "ood" else f"**Against the {set_name} statements.** "
    display(Markdown(lead + answer.opening(frame, metric, higher=True)))

# %% [markdown]
# ## The statements and the scores
#
# A statement's scored word is its last word (a final `.`, `!` or `?` dropped); the model
# reads everything before it. For posterior members $\theta_1 \dots \theta_K$ and a word of
# tokens $w_1 \dots w_J$ after a context $c$, teacher-forced along the word:
#
# - the **loss** is the word's NLL under the predictive,
#   $-\log \frac1K \sum_k p(w \mid c, \theta_k)$ (Table 2);
# - at each position $j$ the next-token distributions $p(\cdot \mid c, w_{<j}, \theta_k)$
#   give $\mathrm{TU}_j = H[\frac1K \sum_k p_k]$, $\mathrm{AU}_j = \frac1K \sum_k H[p_k]$ and
#   $\mathrm{EU}_j = \mathrm{TU}_j - \mathrm{AU}_j$; a statement's TU, AU and EU are their
#   sums over the word's positions (nats);
# - the **AUROC** of TU or EU is the probability that an out-of-distribution statement
#   scores above an in-distribution one (0.5 is chance; Table 1).
#
# The base model and SGD have one parameter vector each: their EU is 0 for every
# statement, so only their TU can flag a statement.

# %%
ood = settings.get("ood", "cipher")
sets = {"ood": ood} if isinstance(ood, str) else dict(ood)


def described(source):
    if source == "cipher":
        return (f"the letter-substitution cipher (seed {settings.get('cipher_seed', 0)}) of the "
                "in-distribution statements: a text no English corpus holds")
    return f"the statements of `{source}`"


named = "; ".join(described(source) if name == "ood" else f"**{name}**: {described(source)}"
                  for name, source in sets.items())
display(Markdown(f"In distribution: the statements of `{settings.get('in_distribution', '?')}`. "
                 f"Out of distribution ({len(sets)} set{'s' if len(sets) > 1 else ''}): {named}. "
                 "The paper's out-of-distribution set is the statements translated into Samoan."))
ends = {name: ("" if name == "ood" else f"_{name}") for name in sets}
tags = {name: ("" if name == "ood" else f", {name}") for name in sets}

# %% [markdown]
# ## What ran

# %%
display(Markdown(sections.what_ran(frame)))

# %% [markdown]
# ## Table 1: AUROC of TU and EU, in- against out-of-distribution statements
#
# Mean over seeds (± standard deviation with several seeds). The first two columns score
# a statement by its TU or EU summed over the word's tokens; the last two by the same
# divided by the number of tokens. A sum grows with the word's length, which varies
# between statements as much as between the sets (a cipher keeps every length), so the
# per-token scores compare the words' uncertainty without it. With several
# out-of-distribution sets, each has its columns.

# %%
table_1 = statement_report.statement_table(frame, {
    f"statements_auroc_{score}{suffix}{ends[name]}": f"AUROC ({score.upper()}{' per token' if suffix else ''}{tags[name]})"
    for name in sets for suffix in ("", "_per_token") for score in ("tu", "eu")}, order)
display(sections.styled(table_1) if not table_1.empty else Markdown("_No fit logged statements metrics._"))

# %% [markdown]
# ## Table 2: loss on in- and out-of-distribution statements
#
# The mean over statements of the last word's NLL under each method's predictive (nats),
# beside the per-token NLL of the held-out windows of the fine-tuning text.

# %%
table_2 = statement_report.statement_table(frame, {
    "statements_nll_in": "NLL, in-distribution",
    **{f"statements_nll_{name}": ("NLL, out-of-distribution" if name == "ood" else f"NLL, {name}") for name in sets},
    "test_nll": "test NLL per token (held-out text)"}, order)
display(sections.styled(table_2) if not table_2.empty else Markdown("_No fit logged statements metrics._"))

# %% [markdown]
# ## Figures 7 and 10: TU and EU of every statement
#
# Densities of TU (top row) and EU (bottom row) over the in-distribution statements and
# their out-of-distribution counterparts, one column per method, seeds pooled. Separated
# histograms mean a good score for "out of distribution".

# %%
long = statement_report.statements_frame(frame, data.evaluations())
if long.empty:
    display(Markdown("_No fit saved per-statement arrays._"))
else:
    experiments.uncertainty_distributions(long, order=order)
    plt.show()

# %% [markdown]
# ## The loss of every statement
#
# The last word's NLL of each statement on either set, one box per method.

# %%
if not long.empty:
    statement_report.statement_nll(long, order=order)
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
