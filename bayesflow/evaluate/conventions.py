"""What every number of :mod:`bayesflow.evaluate` means, one line each, for logging.

Libraries in this field disagree on what "NLL", "Brier" or "ECE" mean (sum or mean,
divided by the number of classes or not, equal-width or equal-mass bins). bayesflow
computes each one way; :data:`CONVENTIONS` says which, keyed by the name the number is
logged under, and docs/metrics.md gives the formulas and references. Every key is a
valid MLflow metric/tag name, so a run can log ``metric.<key>`` tags directly.
:func:`describe` gives the lines of the metrics one evaluation produced, with the
settings it used (bins, binning scheme, interval levels) written in.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BINNINGS", "CONVENTIONS", "VALIDATION_PREFIX", "describe", "on_validation"]

BINNINGS: tuple[str, ...] = ("equal_width", "equal_mass")
# The prefix of a predictive metric computed on the validation rows: ``val_nll`` is
# ``test_nll`` on them (data.validation_fraction, or a CSV file's split_column).
VALIDATION_PREFIX = "val_"

_SINGLE = "mean over posterior samples s of the same metric computed on p(y|x,theta_s) alone"

CONVENTIONS: dict[str, str] = {
    # ------------------------------------------------------------ classification
    "predictive": "mean over posterior samples of predicted probabilities (not of logits)",
    "test_nll": "mean over test points of -log pbar(y|x), pbar clipped at 1e-12; "
    "regression: -log of the mean over samples of N(y; mu_s, noise_sd^2)",
    "test_accuracy": "fraction of test points whose argmax predictive class equals the label",
    "test_ece": "equal-width bins over max predictive probability (default 10), "
    "sum_b |B_b|/n * |acc_b - conf_b|; equal_mass bins cut at the empirical quantiles",
    "test_brier": "mean over test points of sum over classes (p_c - 1[y=c])^2, "
    "not divided by the number of classes (range 0..2)",
    "test_nll_single": _SINGLE,
    "test_accuracy_single": _SINGLE,
    "test_ece_single": _SINGLE + " (same bins as test_ece)",
    "test_brier_single": _SINGLE,
    # ---------------------------------------------------------------- regression
    "test_rmse": "root mean squared error of the predictive mean (mean over samples of mu_s)",
    "test_rmse_single": _SINGLE,
    "test_coverage_50": "fraction of test points inside the central 50% interval of the "
    "Gaussian mixture predictive, exact: |F(y) - 1/2| <= level/2 with "
    "F(y) = mean_s Phi((y - mu_s)/noise_sd) (no sampling, no moment matching)",
    "test_coverage_90": "as test_coverage_50 for the central 90% interval",
    "test_coverage_95": "as test_coverage_50 for the central 95% interval",
    # ------------------------------------------------- uncertainty and OOD (arrays)
    "uncertainty_total": "per point, nats: TU = H[pbar(y|x)], the entropy of the predictive",
    "uncertainty_aleatoric": "per point, nats: AU = mean over samples of H[p(y|x,theta_s)]",
    "uncertainty_epistemic": "per point, nats: EU = TU - AU (mutual information, >= 0)",
    "epistemic_variance": "regression, per point: variance over samples of mu_s "
    "(population variance, ddof 0); predictive variance = noise_sd^2 + this",
    "ood_auroc_total": "AUROC of TU as a score, in-distribution label 0, OOD label 1; "
    "Mann-Whitney with average ranks for ties (0.5 = chance)",
    "ood_auroc_epistemic": "as ood_auroc_total with EU as the score "
    "(regression: the epistemic variance)",
    # ------------------------------------------------------ against a reference
    "ksd": "kernelised Stein discrepancy, V-statistic sqrt(mean_ij k_p(x_i, x_j)) with the "
    "Langevin Stein kernel; IMQ (c^2 + |x-y|^2/h^2)^beta, c=1, beta=-1/2, h=1 by default",
    "reference_mean_error": "sqrt(mean_i ((mu_i - mu_ref_i) / sd_ref_i)^2): "
    "RMS of the mean error in reference standard deviations",
    "reference_variance_error": "mean_i |log(var_i / var_ref_i)| (0 = equal variances)",
    "agreement": "fraction of points whose argmax predictive class equals the reference "
    "predictive's (ties: lowest class index); 1 = the same decisions",
    "total_variation": "mean over points of 0.5 * sum_c |p(c|x) - p_ref(c|x)|, in [0, 1]",
    "wasserstein_2": "mean over points of the 2-Wasserstein distance between the predictive "
    "and the reference predictive, each moment-matched to a Gaussian: "
    "sqrt((mu - mu_ref)^2 + (sd - sd_ref)^2)",
    # ----------------------------------------------------- sampler diagnostics
    "kinetic_temperature": "mean over parameters (and chains) of m^2 / mass, in the engine's "
    "units (per-datum: expected T/N); per tensor as kinetic_temperature/<name>",
    "kinetic_temperature_ratio": "kinetic_temperature / expected temperature (1 = on target)",
    "kinetic_temperature_fraction_inside": "fraction of (chain, tensor) pairs whose kinetic "
    "temperature lies in the 99% interval expected * chi2_d(0.005, 0.995) / d",
    "configurational_temperature": "mean over parameters (and chains) of theta_i * dU/dtheta_i, "
    "U the untempered potential in the engine's units; per tensor as "
    "configurational_temperature/<name>",
    "configurational_temperature_ratio": "configurational_temperature / expected temperature",
    "configurational_temperature_ratio_se": "standard error of configurational_temperature_ratio: "
    "std of the terms theta_i * dU/dtheta_i / sqrt(their number) / expected temperature",
    "kinetic_temperature_band_lower": "0.5% quantile of chi2_n / n, n = parameters x chains: "
    "the lower end of kinetic_temperature_ratio's 99% band at the target",
    "kinetic_temperature_band_upper": "99.5% quantile of chi2_n / n, n = parameters x chains: "
    "the upper end of kinetic_temperature_ratio's 99% band at the target",
    "kinetic_temperature_lower": "per tensor: expected * chi2_d(0.005) / d, d its parameters",
    "kinetic_temperature_upper": "per tensor: expected * chi2_d(0.995) / d, d its parameters",
    "kinetic_temperature_inside": "per tensor: fraction of chains whose kinetic temperature "
    "lies in the tensor's 99% interval",
    "flags": "number of flags raised on the fit (docs/metrics.md, Flags); each is a tag "
    "bayesflow.flag.<metric> with its message",
    "rhat": "rank-normalised split R-hat, max of bulk and folded (Vehtari et al. 2021), per "
    "summary as rhat/<name>; approximate for SG-MCMC",
    "ess": "bulk effective sample size of the rank-normalised split chains (Vehtari et al. "
    "2021, Geyer initial monotone sequence), per summary as ess/<name>; approximate for SG-MCMC",
    "nested_rhat": "nested R-hat of superchains, chains sharing a start (chains_per_start; "
    "Margossian et al. 2024): sqrt(1 + B/W), B the variance of superchain means, W the mean "
    "within-superchain variance; per summary as nested_rhat/<name>; no split, no rank normalisation",
    "nested_rhat_max": "largest nested_rhat/<name> of the fit",
    # -------------------------------------------------------- prior predictive
    "prior_majority_fraction": "mean over prior draws of the fraction of inputs assigned "
    "(argmax) to that draw's most frequent class",
    "prior_max_probability": "mean over prior draws and inputs of max_c p(c|x,theta)",
}


def describe(
    names: Iterable[str], ece_bins: int = 10, ece_binning: str = "equal_width"
) -> dict[str, str]:
    """The convention line of each metric in ``names``, with the evaluation's settings.

    Args:
        names: metric names one evaluation produced.
        ece_bins: bins the ECE used.
        ece_binning: ``"equal_width"`` or ``"equal_mass"``.

    Returns:
        A dict of name to convention; a per-level coverage or per-tensor name falls back
        to its family's line, an unknown name is left out.
    """
    described: dict[str, str] = {}
    for name in names:
        if name in ("test_ece", "test_ece_single"):
            scheme = ece_binning.replace("_", "-")
            text = (
                f"{ece_bins} {scheme} bins over max predictive probability "
                "(right-closed), sum_b |B_b|/n * |acc_b - conf_b|"
            )
            described[name] = text if name == "test_ece" else f"{_SINGLE}; {text}"
        elif name in CONVENTIONS:
            described[name] = CONVENTIONS[name]
        elif name.startswith("test_coverage_"):
            level = name.removeprefix("test_coverage_")
            described[name] = CONVENTIONS["test_coverage_50"].replace("50%", f"{level}%")
        elif "/" in name and name.split("/", 1)[0] in CONVENTIONS:
            described[name] = CONVENTIONS[name.split("/", 1)[0]]
    return described


def on_validation(
    metrics: dict[str, float], conventions: dict[str, str]
) -> tuple[dict[str, float], dict[str, str]]:
    """The ``test_*`` metrics of an evaluation on the validation rows renamed ``val_*``,
    with their convention lines saying so; other metrics (OOD AUROCs) are left out."""
    renamed = {
        name: VALIDATION_PREFIX + name.removeprefix("test_") for name in metrics if name.startswith("test_")
    }
    lines = {
        renamed[name]: f"{line}; on the validation rows (held out of training), not the test rows"
        for name, line in conventions.items() if name in renamed
    }
    return {new: metrics[old] for old, new in renamed.items()}, lines
