"""The flags of a report as one compact table, and the links to it from the numbers
they concern.

A flag (``flag/<column>`` of a results frame, :mod:`bayesflow.evaluate.flags`) concerns
one fit's ``<column>``; the tables mark a mean over seeds that one of its fits' flags
concerns with :data:`~bayesflow.report.tables.MARK`. :func:`flag_table` lists the flags
once, one row per cell (variant, method, temperature) and column with the seeds it was
raised at, what it means in plain words, and what was measured; each row holds the anchor
:func:`anchor` names, so :func:`linked` can turn every mark of a table into a link to the
row it concerns (a mark on a ``finished`` count, which stands for a column the table does
not show, links to the cell's first row).

Every user string is escaped here: the table is HTML.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pandas as pd

from bayesflow.report.tables import MARK, flag_notes
from bayesflow.temperature import TEMPERATURE_FREE

__all__ = ["MEANINGS", "anchor", "flag_table", "linked", "meaning"]

MEANINGS: dict[str, str] = {
    "kinetic_temperature_ratio": (
        "The sampler's momenta hold {way} energy than the temperature allows: its samples "
        "come from a {spread} distribution than the tempered posterior it should sample, "
        "so its numbers at this temperature are not that posterior's."
    ),
    "configurational_temperature_ratio": (
        "The parameters do not sit where draws of the tempered posterior would: a ratio "
        "above 1 means too widely spread, between 0 and 1 too narrowly, and below 0 that "
        "the chain has not reached the region the posterior holds (its weights are still "
        "moving from where they started)."
    ),
    "train_loss": (
        "The variational fit's loss was still falling when it stopped: more epochs would "
        "change its numbers."
    ),
}
"""What a flag on each column means, in plain words."""

COLUMN_NAMES = {
    "kinetic_temperature_ratio": "kinetic temperature",
    "configurational_temperature_ratio": "configurational temperature",
    "train_loss": "training loss",
}
COUNT_COLUMNS = ("finished", "seeds finished")  # a mark here stands for a column not shown


def meaning(column: str, message: str) -> str:
    """The plain-words meaning of a flag on ``column`` whose message is ``message``."""
    text = MEANINGS.get(column, f"A check of {column} failed; the message says which.")
    hot = "runs cold" not in message.lower()  # kinetic_flag's words (its remedy names docs/cold-chains.md)
    return text.format(way="more" if hot else "less", spread="wider" if hot else "narrower")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-")


def anchor(method: Any, temperature: Any, column: str | None = None, variant: Any = None) -> str:
    """The id of a flags-table row: of the cell's flags on ``column``, or (None) of the
    cell's first row. A temperature-free fit's temperature (logged as 0) may be given as
    :data:`~bayesflow.temperature.TEMPERATURE_FREE`."""
    shown = "0" if str(temperature) == TEMPERATURE_FREE else f"{float(temperature):g}"
    parts = [*([str(variant)] if variant is not None and variant == variant else []), str(method), f"T{shown}"]
    return "flag-" + _slug("-".join(parts)) + (f"--{_slug(column)}" if column else "")


def _first_sentence(message: str) -> str:
    head = re.split(r"(?<=[.;])\s", message.strip(), maxsplit=1)[0]
    return head.rstrip(";")


def flag_table(frame: pd.DataFrame) -> str:
    """The flags of the finished fits as one HTML table (empty text when none was
    raised): ``flag`` (a number and the anchor), ``fit`` (method, temperature and the
    seeds it was raised at), ``on`` (the column), ``meaning`` and ``measured`` (the first
    seed's message up to its first sentence; the whole one on hover)."""
    notes = flag_notes(frame)
    if notes.empty:
        return ""
    keyed = ["variant"] if "variant" in notes.columns else []
    rows, cells_seen = [], set()
    for number, (key, group) in enumerate(notes.groupby([*keyed, "method", "temperature", "column"], sort=False), 1):
        values = dict(zip([*keyed, "method", "temperature", "column"], key))
        variant = values.get("variant")
        cell = anchor(values["method"], values["temperature"], variant=variant)
        first = "" if cell in cells_seen else f'<a id="{cell}"></a>'
        cells_seen.add(cell)
        row_id = anchor(values["method"], values["temperature"], values["column"], variant)
        seeds = ", ".join(str(seed) for seed in group["seed"])
        where = f"[{html.escape(str(variant))}] " if variant is not None else ""
        temperature = float(values["temperature"])
        fit = (f"{where}<code>{html.escape(str(values['method']))}</code> "
               f"{'T → 0' if temperature <= 0 else f'T = {temperature:g}'}, "
               f"seed{'s' if len(group) > 1 else ''} {seeds}")
        message = str(group["message"].iloc[0])
        column = str(values["column"])
        rows.append(
            f'<tr id="{row_id}"><td>{first}{MARK} F{number}</td><td>{fit}</td>'
            f"<td>{html.escape(COLUMN_NAMES.get(column, column))}</td>"
            f"<td>{html.escape(meaning(column, message))}</td>"
            f'<td title="{html.escape(message, quote=True)}">{html.escape(_first_sentence(message))}</td></tr>'
        )
    head = "".join(f"<th>{name}</th>" for name in ("flag", "fit", "on", "meaning", "measured"))
    return (
        f'<p><strong>{MARK} Flags</strong>: a {MARK} beside a number links to the flag it '
        "concerns (hover over a measurement for the whole message).</p>"
        f'<table class="flags"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def linked(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every string escaped for HTML and each :data:`MARK` in a cell made a
    link to its row of :func:`flag_table`, found from the row's ``method``, its
    ``temperature`` (or ``best T``) and ``variant``, and the cell's column."""
    out = table.copy()
    marked = "method" in table.columns and ("temperature" in table.columns or "best T" in table.columns)
    for column in out.columns:
        if pd.api.types.is_numeric_dtype(out[column]):
            continue
        out[column] = out[column].astype(object)
        for index, value in out[column].items():
            if not isinstance(value, str):
                continue
            text = html.escape(value, quote=False)
            if marked and MARK in value:
                row = table.loc[index]
                temperature = row["temperature"] if "temperature" in table.columns else row["best T"]
                on = None if column in COUNT_COLUMNS else str(column)
                target = anchor(row["method"], temperature, on, row.get("variant"))
                text = text.replace(MARK, f'<a class="flag-link" href="#{target}">{MARK}</a>')
            out.at[index, column] = text
    return out
