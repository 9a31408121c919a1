"""Figures of the papers' experiments, drawn from a run's results and fit artifacts.

- OOD detection (Duffield et al. 2025, Figure 7): :func:`uncertainty_frame` gathers
  each fit's per-point total and epistemic uncertainty on in- and out-of-distribution
  inputs (``evaluation.npz``); :func:`uncertainty_distributions` draws their densities,
  one column of panels per method.

Fits are named by the results frame's ``cell`` column (a report bundle's join key, see
:mod:`bayesflow.report.bundle`).
- Posterior marginals against a reference (Figure 11): :func:`posterior_draws` turns a
  ``posterior.npz`` of any form into samples; :func:`marginal_densities` draws one KDE
  panel per parameter with the reference filled in grey.
- The double well (Figure 2): :func:`chain_states` splits a sample set into its chains;
  :func:`double_well_panels` draws each method's trajectories and samples over the
  density (:func:`double_well_log_density`).

Functions return the figure and never call ``plt.show()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

__all__ = [
    "INPUTS",
    "SCORES",
    "chain_states",
    "coefficient_labels",
    "double_well_log_density",
    "double_well_panels",
    "marginal_densities",
    "posterior_draws",
    "uncertainty_distributions",
    "uncertainty_frame",
]

INPUTS = ("in-distribution", "out-of-distribution")
# Each score's symbol in the posteriors paper and its axis label.
SCORES = {"total": ("TU", "total uncertainty TU (nats)"),
          "epistemic": ("EU", "epistemic uncertainty EU (nats)")}
REFERENCE_COLOUR = "0.6"


# ------------------------------------------------------------------ OOD detection


def uncertainty_frame(
    frame: pd.DataFrame, evaluations: Mapping[str, Mapping[str, Any]], key: str = "cell"
) -> pd.DataFrame:
    """One row per (fit, input point): its total, aleatoric and epistemic uncertainty.

    Args:
        frame: a results frame (a report bundle's, or :func:`bayesflow.results`).
        evaluations: ``{fit: arrays of its evaluation.npz}``, keyed by the frame's
            ``key`` column (a bundle's :meth:`~bayesflow.report.bundle.Bundle.evaluations`
            by ``cell``; :func:`bayesflow.evaluations` by ``run_id``); fits without OOD
            arrays are left out.
        key: the column that names each fit in ``evaluations``.

    Returns:
        Columns ``method``, ``temperature``, ``seed``, ``key``'s column, ``inputs`` (one
        of :data:`INPUTS`), ``total``, ``aleatoric``, ``epistemic``.
    """
    pieces = []
    for row in frame.to_dict("records"):
        arrays = evaluations.get(row[key])
        if arrays is None or "ood_uncertainty_total" not in arrays:
            continue
        for prefix, inputs in zip(("", "ood_"), INPUTS):
            pieces.append(pd.DataFrame({
                "method": row["method"], "temperature": row["temperature"], "seed": row["seed"],
                key: row[key], "inputs": inputs,
                # A closed-form predictive (`closed_form`) has no per-sample
                # probabilities, so only TU: its AU and EU are missing (NaN).
                **{kind: arrays.get(f"{prefix}uncertainty_{kind}",
                                    np.full(len(arrays[f"{prefix}uncertainty_total"]), np.nan))
                   for kind in ("total", "aleatoric", "epistemic")},
            }))
    columns = ["method", "temperature", "seed", key, "inputs", "total", "aleatoric", "epistemic"]
    return pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=columns)


def uncertainty_distributions(
    long: pd.DataFrame, order: Sequence[str] = (), bins: int = 30
) -> Figure:
    """Densities of TU (top row) and EU (bottom row) on in- and out-of-distribution
    inputs, one column per method, all seeds pooled.

    Histograms rather than KDEs: an optimiser's EU is exactly 0 at every point, a spike
    a KDE cannot draw (such a panel says so). Each panel has its own range, shares its
    bins between the two input sets and normalises each set on its own, so their shapes
    compare whatever their sizes.

    Args:
        long: a frame of :func:`uncertainty_frame`.
        order: methods in the order to draw them (the spec's); others follow.
        bins: histogram bins per panel.
    """
    present = list(pd.unique(long["method"]))
    methods = [method for method in order if method in present]
    methods += [method for method in present if method not in methods]
    count = max(len(methods), 1)
    figure, axes = plt.subplots(len(SCORES), count, figsize=(3.2 * count, 5.6), squeeze=False)
    sets = list(INPUTS) if set(pd.unique(long["inputs"])) <= set(INPUTS) else list(pd.unique(long["inputs"]))
    palette = dict(zip(sets, sns.color_palette(n_colors=len(sets))))
    for column, method in enumerate(methods):
        subset = long.loc[long["method"] == method]
        for row, (score, (symbol, label)) in enumerate(SCORES.items()):
            axis = axes[row][column]
            upper = float(subset[score].max())
            edges = np.linspace(0.0, upper if upper > 0 else 1.0, bins + 1)
            sns.histplot(
                data=subset, x=score, hue="inputs", hue_order=sets, stat="density", common_norm=False,
                bins=edges, element="step", palette=palette, ax=axis,
                legend=(row, column) == (0, count - 1),
            )
            if upper <= 0:
                axis.text(0.5, 0.6, f"{symbol} = 0 at every input\n(one parameter vector)",
                          transform=axis.transAxes, ha="center", fontsize="small")
            axis.set_xlabel(label)
            axis.set_ylabel("density" if column == 0 else "")
            if row == 0:
                axis.set_title(method)
    figure.tight_layout()
    return figure


# -------------------------------------------------- posterior marginals (Pima)


def posterior_draws(arrays: Mapping[str, Any], count: int = 1000, seed: int = 0) -> np.ndarray:
    """Samples (S, d) of a ``posterior.npz``: a sample set as it is (thinned evenly to
    ``count``), a Gaussian (``mean`` with ``var`` or ``cov``) sampled ``count`` times,
    a point estimate (``var`` of zeros) as its one vector."""
    if "samples" in arrays:
        samples = np.asarray(arrays["samples"], dtype=np.float64)
        if samples.shape[0] > count:
            samples = samples[np.linspace(0, samples.shape[0] - 1, count).round().astype(int)]
        return samples
    mean = np.asarray(arrays["mean"], dtype=np.float64)
    generator = np.random.default_rng(seed)
    if "cov" in arrays:
        return generator.multivariate_normal(mean, np.asarray(arrays["cov"], dtype=np.float64), count)
    sd = np.sqrt(np.asarray(arrays["var"], dtype=np.float64))
    if not sd.any():
        return mean[None, :]
    return mean + generator.standard_normal((count, mean.shape[0])) * sd


def coefficient_labels(
    param_names: Sequence[str], param_shapes: Sequence[str], features: Sequence[str] = ()
) -> list[str]:
    """A label per flat parameter: ``weight[i]`` (the feature's name when ``features``
    has one per weight of a single-output linear model), ``bias``, ``name[i]``.

    Args:
        param_names: the tensors' names (``param_names`` of a posterior.npz).
        param_shapes: their shapes as ``posterior.npz`` writes them (``"1x8"``; ``"scalar"``).
        features: the input features' names, in column order.
    """
    labels: list[str] = []
    for name, shape in zip(param_names, param_shapes):
        sizes = [] if shape == "scalar" else [int(size) for size in str(shape).split("x")]
        count = int(np.prod(sizes)) if sizes else 1
        if name.endswith("weight") and len(features) == count:
            labels += [str(feature) for feature in features]
        elif count == 1:
            labels.append(str(name))
        else:
            labels += [f"{name}[{index}]" for index in range(count)]
    return labels


def marginal_densities(
    draws: Mapping[str, np.ndarray], labels: Sequence[str], reference: str | None = None,
    columns: int = 3,
) -> Figure:
    """One panel per parameter: each method's marginal density (KDE), the reference's
    filled in grey underneath; a point estimate is a dashed vertical line.

    Args:
        draws: ``{method: samples (S, d)}``.
        labels: the parameters' names, d of them.
        reference: the method drawn as the grey reference, if any.
        columns: panels per row.
    """
    rows = -(-len(labels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.6 * rows), squeeze=False)
    others = [method for method in draws if method != reference]
    palette = dict(zip(others, sns.color_palette(n_colors=max(len(others), 1))))
    for index, label in enumerate(labels):
        axis = axes[index // columns][index % columns]
        if reference is not None and reference in draws:
            sns.kdeplot(draws[reference][:, index], ax=axis, color=REFERENCE_COLOUR, fill=True,
                        alpha=0.4, linewidth=0, label=f"{reference} (reference)")
        for method in others:
            values = draws[method][:, index]
            if values.shape[0] == 1 or np.ptp(values) == 0:
                axis.axvline(values[0], color=palette[method], linestyle="--", label=method)
            else:
                sns.kdeplot(values, ax=axis, color=palette[method], label=method)
        axis.set_title(label, fontsize="medium")
        axis.set_xlabel("")
        axis.set_ylabel("density" if index % columns == 0 else "")
    for index in range(len(labels), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    handles, names = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, names, loc="lower center", ncol=min(len(names), 4), frameon=False)
    figure.tight_layout(rect=(0, 0.06 if rows > 1 else 0.12, 1, 1))
    return figure


# ------------------------------------------------------------------- double well


def double_well_log_density(
    first: np.ndarray, second: np.ndarray, barrier: float, temperature: float = 1.0
) -> np.ndarray:
    """The tempered double well −(b(θ₁² − 1)² + θ₂²/2)/T of :mod:`bayesflow.models.energy`."""
    return -(barrier * (first**2 - 1) ** 2 + 0.5 * second**2) / temperature


def chain_states(samples: np.ndarray, chains: int) -> np.ndarray:
    """A sample set (K·S, d) whose chains are contiguous (as samplers save them) as
    (K, S, d); one state per chain (K, d) becomes (K, 1, d)."""
    return samples.reshape(chains, -1, samples.shape[-1])


def double_well_panels(
    log_density: Callable[[np.ndarray, np.ndarray], np.ndarray],
    methods: Mapping[str, np.ndarray],
    limits: tuple[float, float, float, float] = (-2.0, 2.0, -2.5, 2.5),
    points_per_chain: int = 300,
) -> Figure:
    """One panel per method over the density's contours: each chain's trajectory as a
    line from its start (an open circle), its states as dots (at most
    ``points_per_chain``, evenly spaced) and its final state as a large dot.

    Args:
        log_density: ``(θ₁, θ₂) -> log p`` on a grid (unnormalised).
        methods: ``{method: states (K, S, 2)}``, K chains of S states in order
            (:func:`chain_states`); S = 1 draws the final states only.
        limits: θ₁ min, θ₁ max, θ₂ min, θ₂ max of every panel.
        points_per_chain: dots drawn per chain.
    """
    first, second = np.meshgrid(np.linspace(*limits[:2], 200), np.linspace(*limits[2:], 200))
    density = np.exp(log_density(first, second))
    figure, axes = plt.subplots(
        1, len(methods), figsize=(4.2 * len(methods), 4.4), squeeze=False, sharey=True
    )
    for axis, (method, states) in zip(axes[0], methods.items()):
        axis.contourf(first, second, density, levels=12, cmap="Greys", alpha=0.6)
        colours = sns.color_palette("husl", n_colors=max(states.shape[0], 1))
        for chain, colour in zip(states, colours):
            if chain.shape[0] > 1:
                axis.plot(chain[:, 0], chain[:, 1], color=colour, linewidth=0.6, alpha=0.7)
                axis.scatter(*chain[0], facecolor="none", edgecolor=colour, s=45, linewidths=1.5)
                shown = chain[np.linspace(0, chain.shape[0] - 1, points_per_chain).astype(int)]
                axis.scatter(shown[:, 0], shown[:, 1], color=colour, s=4, alpha=0.6)
            axis.scatter(*chain[-1], color=colour, edgecolor="black", s=60, zorder=5)
        axis.set(xlim=limits[:2], ylim=limits[2:], title=method, xlabel=r"$\theta_1$")
    axes[0][0].set_ylabel(r"$\theta_2$")
    figure.tight_layout()
    return figure
