"""The Markdown table of the ``kfac`` case (torch-free: read by :mod:`benchmarks.speed.report`)."""

from __future__ import annotations

from typing import Any

from benchmarks.speed.tables import _load, _ms, _ratio, number, table

__all__ = ["kfac_section"]


def kfac_section(results: dict[str, Any]) -> list[str]:
    """The table of the ``kfac`` case."""
    data = results["data"]
    lines = [
        (f"### KFAC Laplace against laplace-torch (digits MLP, {data['rows']} training images, "
         f"d = {data['dimension']:,}, full batch)"),
        "",
        ("One curvature fit (factors and eigendecompositions; bayesflow's also computes the "
         "marginal variances), milliseconds (median ±spread) and the peak memory one fit adds "
         "in a fresh process after one untimed fit; the factor difference is the largest "
         "relative difference of the two libraries' Kronecker factors."),
        "",
    ]
    return lines + table(
        ["engine", "laplace-torch backend", "bayesflow ms", "laplace-torch ms", "ratio",
         "bayesflow peak MiB", "laplace-torch peak MiB", "factor difference", "load"],
        [
            [
                f"`{row['method']}`", f"`{row['backend']}`",
                _ms(row["timings"]["bayesflow"]),
                _ms(row["timings"]["laplace_torch"]),
                _ratio(row["ratio_paired"]),
                _mebibytes(row["peak_bytes"]["bayesflow"]),
                _mebibytes(row["peak_bytes"]["laplace_torch"]),
                f"{row['factor_difference']:.1e}",
                _load(row),
            ]
            for row in results["rows"]
        ],
    )



def _mebibytes(value: int | None) -> str:
    return number(None if value is None else value / 2**20, "{:.1f}")
