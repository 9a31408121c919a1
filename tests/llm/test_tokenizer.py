"""The model folder's tokenizer (`data.tokenizer: model`) and the byte-valued Hugging Face
tokenizer the shipped checkpoint carries."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from bayesflow.data.dataset import resolve_path
from bayesflow.errors import SpecError
from bayesflow.llm.extra import INSTALL
from bayesflow.llm.text import byte_encode, read_text_files
from bayesflow.llm.tokenizer import (
    folder_encoder,
    folder_vocabulary,
    load_folder_tokenizer,
    save_byte_tokenizer,
)

ODD = ["é ü ß ø Ω 漢字 😀🚲", "  two leading spaces\ttab\r\nCRLF", "\x00\x7f\u00a0\u200b", "a<br /><br />b"]


@pytest.fixture(scope="module")
def byte_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bytes")
    save_byte_tokenizer(folder)
    return folder


def test_the_byte_tokenizer_gives_every_byte_its_value(byte_folder: Path) -> None:
    assert sorted(p.name for p in byte_folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    encode = folder_encoder(byte_folder)
    assert folder_vocabulary(byte_folder) == 256
    every_byte = bytes(range(256)).decode("latin-1")  # 128–255 become two UTF-8 bytes each
    texts = [*ODD, every_byte, *read_text_files(sorted(resolve_path("package:lm/corpus").glob("*.txt")))]
    for text in texts:
        ids = encode(text)
        assert ids.dtype == np.int64
        np.testing.assert_array_equal(ids, byte_encode(text))
    tokenizer = load_folder_tokenizer(byte_folder)
    assert tokenizer.decode(encode(ODD[0]).tolist()) == ODD[0]
    assert tokenizer.all_special_ids == []


def test_a_tokenizer_with_special_tokens_adds_none_to_the_text(tmp_path: Path) -> None:
    """A folder tokenizer that would prepend a BOS gives the text's ids only."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocabulary = {"<s>": 0, "[UNK]": 1, "the": 2, "cat": 3, "sat": 4}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocabulary, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    model.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=model, bos_token="<s>", unk_token="[UNK]")
    fast.save_pretrained(str(tmp_path))
    assert fast("the cat")["input_ids"] == [0, 2, 3]  # the folder's own default adds one
    assert folder_encoder(tmp_path)("the cat sat dog").tolist() == [2, 3, 4, 1]
    assert folder_vocabulary(tmp_path) == 5


def test_unusable_folders_are_spec_errors_naming_the_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"data.tokenizer: no model folder '.*nowhere'"):
        folder_encoder(tmp_path / "nowhere")
    with pytest.raises(SpecError, match=rf"model.path: the model folder '{tmp_path}' has no tokenizer"):
        folder_encoder(tmp_path, where="model.path")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SpecError, match=r"has no tokenizer that transformers loads offline .*tokenizer: bytes"):
        folder_vocabulary(tmp_path)


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch, byte_folder: Path) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    with pytest.raises(SpecError, match=INSTALL.replace("[", r"\[").replace("]", r"\]")):
        folder_encoder(byte_folder)
