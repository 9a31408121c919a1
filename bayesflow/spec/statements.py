"""``evaluate.statements``: the last-word evaluation of a causal language model on
statements, in distribution and out of it (torch-free).

The files are read with the data (:mod:`bayesflow.data.statements`), so that a missing,
empty or non-UTF-8 file is a spec error at validate; the scores are
:mod:`bayesflow.stages.statements`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator

from bayesflow.families import family_of
from bayesflow.spec.strict import Strict

__all__ = ["CIPHER", "OOD", "StatementsSpec", "statements_problems"]

# The value of `ood` that derives the OOD set from the in-distribution one.
CIPHER = "cipher"
# The name of the one OOD set a plain `ood: <source>` gives (its metrics keep their plain
# names: statements_auroc_eu, statements_nll_ood).
OOD = "ood"
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class StatementsSpec(Strict):
    """Complete the last word of statements: per statement the NLL of the word and its
    total / aleatoric / epistemic uncertainty over the posterior's members, and the
    AUROC of TU and of EU telling out-of-distribution statements from in-distribution
    ones (the posteriors paper, Section 5.3; a causal language model only)."""

    in_distribution: str = Field(
        "package:lm/statements/science.txt",
        description="A UTF-8 file of in-distribution statements, one a line (blank lines and "
        "`#` lines skipped), relative to the spec's folder or `package:...`. The scored word "
        "is the text after a statement's last space, one final `.`, `!` or `?` dropped; the "
        "model reads everything before it.",
    )
    ood: str | dict[str, str] = Field(
        CIPHER,
        description="The out-of-distribution statements: `cipher` substitutes every letter of "
        "the in-distribution statements through one seeded permutation of the alphabet (a "
        "text no English corpus holds: the CPU-scale stand-in for the paper's Samoan "
        "translations), or a file in the format of `in_distribution`; or several such sets "
        "as a mapping of names (lower-case letters, digits, `_`) to `cipher` or a file, e.g. "
        "`{cipher: cipher, esperanto: package:lm/statements/science_esperanto.txt}`, each "
        "scored against the in-distribution set (metrics `statements_auroc_eu_<name>`, "
        "`statements_nll_<name>`, ...).",
    )
    cipher_seed: NonNegativeInt = Field(0, description="Seed of the `cipher` permutation.")
    n_samples: PositiveInt | None = Field(
        None,
        description="Posterior members the statements are scored under (a sample set is "
        "thinned evenly; a point estimate is one member); null: `evaluate.n_samples`.",
    )
    batch_size: PositiveInt = Field(
        16, description="Statements per forward pass (padded on the right to the longest)."
    )

    @field_validator("ood")
    @classmethod
    def _named_sets(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        if isinstance(value, str):
            return value
        if not value:
            raise ValueError("names no set: give one source (`cipher` or a file) or at least one `name: source`")
        for name in value:
            if not _NAME.fullmatch(name) or name == "in":
                raise ValueError(f"set name {name!r} is not lower-case letters, digits and `_` (starting with a "
                                 "letter, not `in`): it becomes part of metric names such as "
                                 f"statements_auroc_eu_<name>")
        return value

    def ood_sets(self) -> list[tuple[str, str]]:
        """The out-of-distribution sets as (name, source): ``[("ood", source)]`` for one
        plain source, else the mapping's items in its order."""
        return [(OOD, self.ood)] if isinstance(self.ood, str) else list(self.ood.items())


def statements_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """``evaluate.statements`` asks a language model for words: refused for any other model."""
    evaluate = data.get("evaluate") if isinstance(data, dict) else None
    if not isinstance(evaluate, dict) or evaluate.get("statements") is None:
        return []
    model = data.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    if "statements" in family_of(str(name)).evaluations:  # the family that scores words
        return []
    return [(("evaluate", "statements"),
             (f"scores the last word of statements under a causal language model, but "
              f"`model.name` is {name!r}; use `model: {{name: causal_lm, ...}}` with text data, "
              "or remove evaluate.statements"))]
