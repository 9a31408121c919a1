"""Checks of an exported report page's HTML itself."""

from __future__ import annotations

import bs4

LEAVES = ("mi", "mo", "mn", "mtext")


def formulas_in(page: str) -> list[bs4.Tag]:
    """The page's ``<math>`` elements, each checked to hold its formula: MathML children,
    and every identifier, operator, number and text with its symbol inside it."""
    soup = bs4.BeautifulSoup(page, "html.parser")
    formulas = soup.find_all("math")
    for formula in formulas:
        leaves = formula.find_all(LEAVES)
        assert leaves, f"an empty formula: {formula}"
        empty = [str(leaf) for leaf in leaves if not leaf.get_text()]
        assert not empty, f"formula elements without their symbol: {empty[:5]} in {formula}"
    loose = [str(leaf) for leaf in soup.find_all(LEAVES) if leaf.find_parent("math") is None]
    assert not loose, f"MathML elements outside any formula: {loose[:5]}"
    return formulas
