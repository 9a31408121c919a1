"""The language-model texts bayesflow ships (bayesflow/data/files/lm/): the corpus, the
science text and its statements, as `package:lm/...` paths."""

from __future__ import annotations

import re

from bayesflow.data.dataset import resolve_path
from bayesflow.llm.text import episode_windows, read_text_files

CORPUS = sorted(resolve_path("package:lm/corpus").glob("*.txt"))
SCIENCE = sorted(resolve_path("package:lm/science").glob("*.txt"))


def statements() -> list[str]:
    """The statements file's statements, by the format every reader follows."""
    text = resolve_path("package:lm/statements/science.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def last_word(statement: str) -> str:
    """The scored part: after the last space, a final . ! or ? dropped."""
    word = statement.rsplit(" ", 1)[1]
    return word[:-1] if word[-1] in ".!?" else word


def test_the_corpus_is_several_utf8_documents_that_give_episodes() -> None:
    documents = read_text_files(CORPUS)  # UTF-8, not empty
    assert len(documents) >= 5
    assert all(4_000 <= len(document.encode("utf-8")) <= 8_000 for document in documents)
    assert len({document[:200] for document in documents}) == len(documents)
    assert any(not document.isascii() for document in documents)  # multi-byte characters too
    episodes = episode_windows(documents, length=256, stride=128, scored=64, test_fraction=0.15)
    assert set(episodes.episode_test.tolist()) == set(range(len(documents)))


def test_every_statement_ends_in_a_word_the_science_text_states() -> None:
    lines = statements()
    assert len(lines) == 100 and len(set(lines)) == 100
    science = re.sub(r"\s+", " ", " ".join(read_text_files(SCIENCE)))
    assert 15_000 <= len(science.encode("utf-8")) <= 25_000
    words = [last_word(line) for line in lines]
    assert all(re.fullmatch(r"[A-Za-z]+", word) for word in words)
    assert sum(word.islower() for word in words) >= 90
    for line, word in zip(lines, words, strict=True):
        assert re.search(rf"\b{word}\b", science), line  # the fact is in the text the model reads
    header = resolve_path("package:lm/statements/science.txt").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("#") and "bayesflow" in header
