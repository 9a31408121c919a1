"""Where a causal language model comes from: a config (random weights, nothing
downloaded) or a local folder (``local_files_only``: nothing is fetched).

Attention is always transformers' ``eager`` implementation: it batches over chains under
``torch.func.vmap``; the default SDPA path fails there with a batched attention mask
(its causal-mask shortcut calls ``.all()`` on a tensor; docs/llm.md, the model source).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bayesflow.errors import SpecError
from bayesflow.llm.extra import require
from bayesflow.spec.llm import CausalLMSpec

if TYPE_CHECKING:
    from torch import nn

__all__ = ["TOKENIZER", "WEIGHTS", "build_base_model", "check_folder", "config_of"]

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
           "pytorch_model.bin.index.json")
TOKENIZER = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_folder(path: str, base_dir: Path | None = None, where: str = "model.path") -> Path:
    """The model folder ``path`` (relative to ``base_dir``, or ``package:NAME`` for a folder
    shipped with bayesflow, e.g. ``package:lm/checkpoint``), checked to hold a config,
    weights and a tokenizer, so that loading it needs no network. ``models:NAME`` (a pulled
    model) and a GGUF file or folder are their folders in the model cache
    (:func:`bayesflow.llm.model_cache.resolve_model_path`).

    Raises:
        SpecError: the folder does not exist, or lacks one of the three.
    """
    from bayesflow.llm.model_cache import resolve_model_path

    cached = resolve_model_path(path, base_dir, where)
    if cached is not None:
        folder = cached
    elif path.startswith("package:"):
        from bayesflow.data.dataset import resolve_path

        folder = resolve_path(path)
    else:
        folder = Path(path).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    if not folder.is_dir():
        raise SpecError(
            f"{where}: no folder {str(folder)!r}; a model is read from a local folder only "
            "(nothing is downloaded): save one there with `save_pretrained`"
        )
    present = {item.name for item in folder.iterdir()}
    wanted = {"config.json": ("config.json",), "weights": WEIGHTS, "a tokenizer": TOKENIZER}
    missing = [what for what, names in wanted.items() if not present & set(names)]
    if missing:
        raise SpecError(
            f"{where}: folder {str(folder)!r} lacks {' and '.join(missing)} "
            f"(weights: one of {', '.join(WEIGHTS)}; tokenizer: one of {', '.join(TOKENIZER)}); "
            f"it holds: {', '.join(sorted(present)) or 'nothing'}"
        )
    return folder


def build_base_model(spec: CausalLMSpec, base_dir: Path | None = None) -> nn.Module:
    """The frozen model of ``spec`` (no adapters yet), in eval mode, every parameter
    ``requires_grad=False``, its weights in ``spec.dtype``.

    Raises:
        SpecError: the ``llm`` extra is missing, or the folder is unusable.
    """
    import torch

    transformers = require("transformers")
    dtype = getattr(torch, spec.dtype)
    if spec.path is not None:
        folder = check_folder(spec.path, base_dir)
        # transformers draws a "Loading weights" bar per load: one per stage and worker in a
        # run's output, where the progress is bayesflow's own
        transformers.utils.logging.disable_progress_bar()
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, dtype=dtype, attn_implementation=spec.attention
        )
    else:
        with torch.random.fork_rng(devices=[]):  # the same weights whatever the global seed
            torch.manual_seed(spec.seed)
            model = transformers.AutoModelForCausalLM.from_config(config_of(spec), dtype=dtype)
    model.eval()  # no dropout: a random operation under vmap is an error
    model.requires_grad_(False)
    return model  # type: ignore[no-any-return]


def config_of(spec: CausalLMSpec) -> object:
    """The transformers config of a config-built model."""
    transformers = require("transformers")
    intermediate = spec.intermediate_size or 4 * spec.hidden_size
    common = {"vocab_size": spec.vocab_size, "attn_implementation": spec.attention,
              "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if spec.family == "llama":
        return transformers.LlamaConfig(
            hidden_size=spec.hidden_size, intermediate_size=intermediate,
            num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
            num_key_value_heads=spec.heads, max_position_embeddings=spec.context, **common,
        )
    return transformers.GPT2Config(
        n_embd=spec.hidden_size, n_inner=intermediate, n_layer=spec.layers, n_head=spec.heads,
        n_positions=spec.context, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
    )
