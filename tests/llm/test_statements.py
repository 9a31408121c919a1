"""Statements as an evaluation: the file format, the cipher, the tokens, and the last
word's log probability, NLL, TU / AU / EU and AUROC under K members, against the model's
own forward, SciPy's entropy and scikit-learn's AUROC."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import entropy
from sklearn.metrics import roc_auc_score

from bayesflow.errors import DataError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.statement_scores import score_statements, statement_metrics
from bayesflow.llm.statements import (
    cipher,
    cipher_table,
    encode_statements,
    read_statements,
    split_statement,
)
from bayesflow.llm.text import byte_encode
from bayesflow.priors import diag_normal
from tests.llm.conftest import tiny
from tests.numerics import reordered

STATEMENTS = Path(__file__).parent / "files" / "statements.txt"
SUBSETS = {
    "lora": tiny(),
    "last_layer": tiny(trainable={"parameters": ["model.layers.1.*"]}),
}
# Words of one byte: the decomposition of one categorical, no chain rule.
ONE_TOKEN = ["The chemical symbol of oxygen is O.", "Vitamin C", "Its grade was A!"]


def problem_and_members(subset: str, count: int = 3):
    torch.manual_seed(0)
    model, names = build_causal_lm(SUBSETS[subset])
    problem = build_lm_problem(model, names, diag_normal(1.0), 100, 4)
    members = torch.stack([problem.init_params(torch.Generator().manual_seed(s)) for s in range(count)])
    # LoRA's B off zero and the last layer off its pretrained values: the members differ.
    members = members + 0.3 * torch.randn(members.shape, generator=torch.Generator().manual_seed(9))
    return model, names, problem, members


@contextlib.contextmanager
def tensors_set(model, names, params) -> Iterator[None]:
    """The model with its trainable tensors holding ``params`` in place, restored after."""
    values = dict(model.named_parameters())
    saved = {name: values[name].detach().clone() for name in names}
    pieces = params.split([values[name].numel() for name in names])
    with torch.no_grad():
        for name, piece in zip(names, pieces):
            values[name].copy_(piece.view_as(values[name]))
        try:
            yield
        finally:
            for name in names:
                values[name].copy_(saved[name])


def own_forward(model, names, members, statements):
    """Per member and statement, the word positions' float64 log-softmax (J, V) from a plain
    ``model(ids).logits`` of the statement alone, and the word's tokens."""
    encoded = encode_statements(statements)
    result = []
    for member in members:
        with tensors_set(model, names, member):
            rows = []
            for tokens, start in encoded:
                logits = model(torch.as_tensor(tokens)[None], use_cache=False).logits[0]
                rows.append(logits[start - 1 : -1].double().log_softmax(-1).numpy())
        result.append(rows)
    return result, [tokens[start:] for tokens, start in encoded]


# ----------------------------------------------------------------------------- the text side


def test_the_file_gives_its_statements_without_comments_or_blank_lines() -> None:
    """Comment and blank lines are skipped, each statement is stripped."""
    statements = read_statements(STATEMENTS)
    assert len(statements) == 7
    assert statements[0] == "Water boils at one hundred degrees Celsius at sea level."
    assert not any(s.startswith("#") or s != s.strip() for s in statements)


def test_the_scored_word_is_the_last_word_without_final_punctuation() -> None:
    """The context keeps the space before the word; one final . ! or ? is dropped."""
    assert split_statement("A magnet attracts iron.") == ("A magnet attracts ", "iron")
    assert split_statement("Sound travels faster in water than in air!") == (
        "Sound travels faster in water than in ", "air")
    assert split_statement("Which planet is closest to the Sun? Mercury.") == (
        "Which planet is closest to the Sun? ", "Mercury")
    assert split_statement("Vitamin C") == ("Vitamin ", "C")


@pytest.mark.parametrize("content, message", [
    (b"", r"holds no statement \(its 0 lines"),
    (b"# only a comment\n\n   \n", r"holds no statement \(its 3 lines"),
    (b"A good line here.\nfine\n", r"line 2: 'fine' needs at least two words"),
    (b"A good line here.\nAnother one .\n", r"line 2: 'Another one .' needs at least two words"),
    (b"# comment\nA good line.\nBad \xff byte here.\n", r"line 3 is not UTF-8 text \(byte 27"),
])
def test_bad_files_are_data_errors_naming_the_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    """An empty file, only comments, a one-word line or a non-UTF-8 byte: a DataError
    naming the file (and the line where there is one)."""
    path = tmp_path / "mine.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=r"evaluate\.statements: '.*mine\.txt' " + message):
        read_statements(path)


def test_a_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no file .*absent.txt"):
        read_statements(tmp_path / "absent.txt")


def test_the_cipher_is_a_seeded_bijection_on_letters_keeping_everything_else() -> None:
    """Letters map through one permutation (capitals alike), other characters stay, the
    same seed gives the same text and another seed another, and no statement is left as it was."""
    statements = read_statements(STATEMENTS) + ["Digits 123, commas; and (brackets) stay: é too"]
    for seed in (0, 1, 7):
        table = cipher_table(seed)
        lower = [chr(table[ord(c)]) for c in "abcdefghijklmnopqrstuvwxyz"]
        assert sorted(lower) == list("abcdefghijklmnopqrstuvwxyz")
        assert [chr(table[ord(c.upper())]) for c in "abcdefghijklmnopqrstuvwxyz"] == [c.upper() for c in lower]
        assert lower != list("abcdefghijklmnopqrstuvwxyz")
        coded = cipher(statements, seed)
        assert coded == cipher(statements, seed)
        for plain, secret in zip(statements, coded):
            assert plain != secret and len(plain) == len(secret)
            for a, b in zip(plain, secret):
                assert (b == a) if not (a.isascii() and a.isalpha()) else (b.isalpha() and a.isupper() == b.isupper())
    assert cipher(statements, 0) != cipher(statements, 1)


def test_tokens_are_the_context_then_the_word_each_encoded_alone() -> None:
    """Bytes by default; any encoder callable (here characters) gives its own tokens."""
    (tokens, start), = encode_statements(["A magnet attracts iron."])
    assert start == len(b"A magnet attracts ")
    assert tokens.tolist() == list(b"A magnet attracts iron")

    def by_character(text: str) -> list[int]:
        return [ord(c) for c in text]

    (tokens, start), = encode_statements(["Heat flows to the côté."], by_character)
    assert start == len("Heat flows to the ") and tokens[start:].tolist() == by_character("côté")
    with pytest.raises(DataError, match="statement 0 .* encodes to no word token"):
        encode_statements(["two words"], lambda text: [] if text == "words" else [1])


# ------------------------------------------------------------------------------- the scores


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_word_log_probabilities_are_the_models_own_forward(subset: str) -> None:
    """Each member's log p(word | context) equals the sum over the word's tokens of the
    log-softmax of ``model(ids).logits`` of the statement alone, with the member's tensors
    set in the model."""
    model, names, problem, members = problem_and_members(subset)
    statements = read_statements(STATEMENTS) + ONE_TOKEN
    scores = score_statements(problem, members, encode_statements(statements), statements_per_call=4)
    forwards, words = own_forward(model, names, members, statements)
    expected = np.array([[rows[i][np.arange(len(words[i])), words[i]].sum() for i in range(len(statements))]
                         for rows in forwards])
    np.testing.assert_allclose(scores.log_prob, expected, **reordered(torch.float32, 256 * 32, scale=10.0))
    assert np.all(scores.log_prob < 0)


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_uncertainties_are_the_decomposition_summed_over_the_words_positions(subset: str) -> None:
    """TU = H[mean of the members' next-token distributions], AU = the mean of their
    entropies, EU = TU − AU at each word position (SciPy's entropy), summed over the
    positions; for one-token words that is the plain decomposition of one categorical.
    The NLL is −log of the members' mean p(word | context)."""
    model, names, problem, members = problem_and_members(subset, count=4)
    statements = read_statements(STATEMENTS) + ONE_TOKEN
    scores = score_statements(problem, members, encode_statements(statements))
    forwards, words = own_forward(model, names, members, statements)
    for index in range(len(statements)):
        probs = np.exp(np.stack([rows[index] for rows in forwards]))  # (K, J, V)
        total = sum(entropy(probs[:, j].mean(0)) for j in range(probs.shape[1]))
        aleatoric = sum(np.mean([entropy(p) for p in probs[:, j]]) for j in range(probs.shape[1]))
        tolerance = reordered(torch.float32, 256 * 32, scale=5.0)
        np.testing.assert_allclose(scores.total[index], total, **tolerance)
        np.testing.assert_allclose(scores.aleatoric[index], aleatoric, **tolerance)
        np.testing.assert_allclose(scores.epistemic[index], total - aleatoric, **tolerance)
        if index >= len(statements) - len(ONE_TOKEN):
            assert probs.shape[1] == 1
        word = np.log(probs[:, np.arange(len(words[index])), words[index]]).sum(1)
        np.testing.assert_allclose(scores.nll[index], -(logsumexp(word) - math.log(len(members))), **tolerance)
    assert np.all(scores.epistemic > 0) and np.all(scores.aleatoric > 0)


def test_batched_and_padded_equals_each_statement_alone() -> None:
    """Statements of different lengths padded together, and members in chunks, give the
    scores of each statement run alone with all members at once."""
    _, _, problem, members = problem_and_members("last_layer")
    encoded = encode_statements(read_statements(STATEMENTS) + ONE_TOKEN)
    lengths = {len(tokens) for tokens, _ in encoded}
    assert len(lengths) >= len(encoded) - 1  # the call below pads all but one
    batched = score_statements(problem, members, encoded, statements_per_call=16, members_per_call=2)
    alone = [score_statements(problem, members, [row]) for row in encoded]
    for field in ("log_prob", "nll", "total", "aleatoric", "epistemic"):
        expected = np.concatenate([getattr(one, field) for one in alone], axis=-1)
        np.testing.assert_allclose(getattr(batched, field), expected, **reordered(torch.float32, 256 * 32, scale=10.0))


def test_one_member_has_no_epistemic_uncertainty_and_an_eu_auroc_of_one_half() -> None:
    """With K = 1, TU = AU exactly and EU = 0, so EU cannot tell the sets apart."""
    _, _, problem, members = problem_and_members("lora", count=1)
    statements = read_statements(STATEMENTS)
    inside = score_statements(problem, members, encode_statements(statements))
    outside = score_statements(problem, members, encode_statements(cipher(statements, 0)))
    assert np.array_equal(inside.total, inside.aleatoric) and not inside.epistemic.any()
    np.testing.assert_array_equal(inside.nll, -inside.log_prob[0])
    metrics = statement_metrics(inside, outside)
    assert metrics["statements_auroc_eu"] == 0.5 and metrics["statements_eu_ood"] == 0.0


def test_summary_metrics_are_the_means_and_sklearns_auroc() -> None:
    """The AUROC of TU and of EU (OOD = 1) equal scikit-learn's roc_auc_score; the other
    metrics are the per-set means."""
    _, _, problem, members = problem_and_members("lora", count=3)
    statements = read_statements(STATEMENTS) + ONE_TOKEN
    inside = score_statements(problem, members, encode_statements(statements))
    outside = score_statements(problem, members, encode_statements(cipher(statements, 3)))
    metrics = statement_metrics(inside, outside)
    labels = np.r_[np.zeros(len(statements)), np.ones(len(statements))]
    for name, field in (("tu", "total"), ("eu", "epistemic")):
        scores = np.r_[getattr(inside, field), getattr(outside, field)]
        assert metrics[f"statements_auroc_{name}"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert metrics["statements_nll_in"] == pytest.approx(inside.nll.mean())
    assert metrics["statements_au_ood"] == pytest.approx(outside.aleatoric.mean())
    assert set(metrics) == {f"statements_{n}_{s}" for n in ("nll", "tu", "au", "eu") for s in ("in", "ood")} | {
        "statements_auroc_tu", "statements_auroc_eu"}


def test_byte_tokens_match_the_text_modules_encoder() -> None:
    """The default encoder is the byte tokenizer of bayesflow.llm.text."""
    (tokens, _), = encode_statements(["Ice melts."])
    assert tokens.tolist() == byte_encode("Ice melts").tolist()
