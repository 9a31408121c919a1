"""Load a workflow spec: read, parse safely, compose, override, resolve, validate.

Every failure raises :class:`~bayesflow.errors.SpecError` listing *all* problems found at
the stage that failed, each with its location, the key path, what was expected and
found, and a close match for a misspelt name. Every leaf remembers where it came from: a
line of the spec file, a line of the base spec it ``extends``, or a command-line
override (``override 'methods.vi.epochs=5'``).
"""

from __future__ import annotations

import copy
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from bayesflow.errors import SpecError
from bayesflow.spec.bundled import resolve_spec_path
from bayesflow.spec.checks import check_data
from bayesflow.spec.errors import format_cross_problems, format_validation_error, nearest_location
from bayesflow.spec.interpolation import create_config, resolve_config
from bayesflow.spec.locations import Located, Location, YamlProblem, parse_yaml
from bayesflow.spec.models import WorkflowSpec
from bayesflow.spec.overrides import apply_overrides
from bayesflow.spec.relations import cross_check

__all__ = ["MAX_SPEC_BYTES", "LoadedSpec", "load_spec"]

# A hand-written spec is a few kilobytes (the bundled cold_posterior.yaml: 3 KB). Refusing
# anything past 256 KiB keeps a data file passed by mistake from being parsed at all
# (PyYAML's pure-Python parser reads about 1 MB/s).
MAX_SPEC_BYTES = 256 * 1024

KeyPath = tuple[str, ...]


@dataclass
class LoadedSpec:
    """A validated spec with what it was made from.

    Attributes:
        spec: the validated model.
        path: the spec file (None when built from a mapping).
        resolved: the resolved plain mapping that was validated.
        locations: where each key path came from (file line, base spec line, override).
        overrides: the command-line overrides applied.
    """

    spec: WorkflowSpec
    path: Path | None
    resolved: dict[str, Any]
    locations: dict[KeyPath, Location] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the spec are taken from."""
        return self.path.parent if self.path is not None else Path.cwd()

    def origin(self, key: str) -> Location | None:
        """Where the value at a dotted ``key`` (``methods.vi.epochs``) came from."""
        return nearest_location(tuple(key.split(".")), self.locations)

    def to_yaml(self) -> str:
        """The resolved spec with defaults filled in, as YAML that loads back to the same
        spec: keys set to null (``batch_size: null``, full batch) are shown, not dropped."""
        data = self.spec.model_dump(mode="json", by_alias=True)
        return OmegaConf.to_yaml(OmegaConf.create(data))


def _missing_hint(path: Path) -> str:
    """What to do about a spec path that does not exist: run the bundled workflow of that
    name where there is one (``workflows/cold_posterior.yaml`` typed outside a checkout),
    else check the path."""
    from bayesflow.spec.bundled import bundled_workflows

    if path.suffix in (".yaml", ".yml") and path.stem in bundled_workflows():
        return (f"did you mean the bundled workflow {path.stem!r}? run: "
                f"bayesflow run {path.stem}")
    return "check the path"


def _read(path: Path) -> str:
    """The text of the spec file ``path``, read only if it is a regular file and at most
    :data:`MAX_SPEC_BYTES` long, so that ``/dev/zero`` or a named pipe passed by mistake
    is refused at once instead of being read forever or waited on."""
    try:
        if not path.exists():
            raise SpecError(f"{path}: file not found; {_missing_hint(path)}", str(path))
        if path.is_dir():
            raise SpecError(f"{path}: is a folder; pass a workflow .yaml file", str(path))
        # O_NONBLOCK: opening a named pipe for reading would otherwise wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(mode):
                raise SpecError(
                    f"{path}: is {_kind(mode)}, not a regular file; pass a workflow .yaml file",
                    str(path),
                )
            size = os.fstat(descriptor).st_size
            raw = b"" if size > MAX_SPEC_BYTES else _read_at_most(descriptor, MAX_SPEC_BYTES + 1)
        finally:
            os.close(descriptor)
        if max(size, len(raw)) > MAX_SPEC_BYTES:  # len(raw): a file that grew since fstat
            raise SpecError(
                f"{path}: file is {max(size, len(raw))} bytes, more than the {MAX_SPEC_BYTES} a spec "
                "may have; is this the right file?",
                str(path),
            )
    except (OSError, ValueError) as error:
        raise SpecError(f"{path}: cannot be read ({error}); check the path", str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"{path}:{line}: the file is not UTF-8 (byte {raw[exc.start]:#x} at offset "
            f"{exc.start}); save it as UTF-8",
            str(path),
        ) from None


def _read_at_most(descriptor: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``descriptor`` (fewer only at the end of the file)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(descriptor, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    kinds = [
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _parse_one(path: Path) -> Located:
    """Parse one file into a mapping with locations (no ``extends`` handling)."""
    text = _read(path)
    try:
        located = parse_yaml(text, str(path))
    except YamlProblem as exc:
        raise SpecError(f"{exc.location}: {exc.message}", str(path)) from None
    if located.data is None:
        raise SpecError(f"{path}: the file is empty; a spec is a YAML mapping of keys", str(path))
    if not isinstance(located.data, dict):
        kind = "a list" if isinstance(located.data, list) else f"a {type(located.data).__name__}"
        raise SpecError(
            f"{path}:1:1: the document is {kind}; a spec is a YAML mapping "
            "(`name: ...`, `data: ...`, ...)",
            str(path),
        )
    return located


def _parse_file(path: Path, seen: tuple[Path, ...] = ()) -> Located:
    """Parse ``path`` and, recursively, the base specs it ``extends``."""
    located = _parse_one(path)
    if "extends" not in located.data:
        return located
    base_name = located.data.pop("extends")
    where = located.locations.get(("extends",), Location(str(path)))
    if not isinstance(base_name, str) or not base_name:
        raise SpecError(f"{where}: extends: expected a file name, got {base_name!r}", str(path))
    base_path = (path.parent / base_name).resolve()
    if base_path in seen or base_path == path.resolve():
        chain = " -> ".join(str(p) for p in (*seen, path.resolve(), base_path))
        raise SpecError(f"{where}: extends: {base_name} forms a cycle ({chain}); remove one `extends`", str(path))
    if not base_path.exists():  # a folder or a pipe is refused by _read, saying what it is
        raise SpecError(f"{where}: extends: base spec {str(base_path)!r} not found; check the path", str(path))
    base = _parse_file(base_path, (*seen, path.resolve()))
    try:
        merged = OmegaConf.to_container(
            OmegaConf.merge(OmegaConf.create(base.data), OmegaConf.create(located.data)),
            resolve=False,
        )
    except OmegaConfBaseException as error:
        full_key = getattr(error, "full_key", None)
        key_path = tuple(str(full_key).split(".")) if full_key else ()
        at = nearest_location(key_path, located.locations) or where
        raise SpecError(
            f"{at}: {full_key or '(top level)'}: cannot be merged onto {base_name} "
            f"({str(error).splitlines()[0]}); give it the same shape as in the base spec",
            str(path),
        ) from None
    return Located(merged, _merge_locations(base.locations, located))


def _merge_locations(base: dict[KeyPath, Location], child: Located) -> dict[KeyPath, Location]:
    """The child's locations over the base's; a child value that is not a mapping replaces
    the base's subtree wholesale, so the base's locations below it are dropped."""
    replaced = [path for path in child.locations if path and not isinstance(_at(child.data, path), dict)]
    kept = {
        path: location for path, location in base.items()
        if not any(path[: len(prefix)] == prefix and path != prefix for prefix in replaced)
    }
    return {**kept, **child.locations}


def _at(data: Any, path: KeyPath) -> Any:
    for part in path:
        if isinstance(data, dict):
            data = next((value for key, value in data.items() if str(key) == part), None)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def _for_cross_check(resolved: dict[str, Any]) -> dict[str, Any]:
    """The mapping with string method names and `from` values only: the cross-field checks
    run before validation, and a key or `from` of another type is reported by validation."""
    methods = resolved.get("methods")
    if not isinstance(methods, dict):
        return resolved
    clean: dict[str, Any] = {}
    for name, method in methods.items():
        if isinstance(method, dict) and "from" in method and not isinstance(method["from"], str):
            method = {key: value for key, value in method.items() if key != "from"}
        clean[str(name)] = method
    return {**resolved, "methods": clean}


def _check_template(spec: WorkflowSpec) -> list[tuple[tuple[str, ...], str]]:
    """A report template that cannot be found is a spec error, not a failure after the fits."""
    if not spec.report.enabled:
        return []
    from bayesflow.errors import RegistryError
    from bayesflow.report.render import find_template

    try:
        find_template(spec.report.template)
    except RegistryError as error:
        return [(("report", "template"), str(error))]
    return []


# Keys holding a file or folder path. Written in a spec file they are relative to that
# file; given on the command line they are relative to the working directory, as a user
# typing `data.path=../data` next to a bundled workflow expects. LIST_PATH_KEYS hold a list
# of paths (`data.files=[a.txt,books/]`, or one entry: `data.files.0=a.txt`).
PATH_KEYS = (("data", "path"), ("data", "csv"), ("model", "path"), ("evaluate", "reference", "file"))
LIST_PATH_KEYS = (("data", "files"),)


def _anchor_override_paths(config: Any, locations: dict[tuple[str, ...], Location]) -> None:
    """Make relative paths that came from an override absolute (from the working directory)."""
    from omegaconf import ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def overridden(key: tuple[str, ...]) -> bool:
        where = locations.get(key)
        return where is not None and where.line is None

    def select(key: tuple[str, ...]) -> Any:
        try:
            return OmegaConf.select(config, ".".join(key), default=None)
        except OmegaConfBaseException:  # a parent that is no mapping (`data: []`): validation names it
            return None

    for key in PATH_KEYS:
        value = select(key)
        if overridden(key) and _relative(value):
            OmegaConf.update(config, ".".join(key), str(Path.cwd() / value), merge=False)
    for key in LIST_PATH_KEYS:
        values = select(key)
        if not isinstance(values, ListConfig):
            continue
        for index, value in enumerate(values):
            if (overridden(key) or overridden((*key, str(index)))) and _relative(value):
                values[index] = str(Path.cwd() / value)


def _relative(value: Any) -> bool:
    """A path written relative to somewhere (not absolute, ``package:``, ``models:`` (a
    pulled model, :mod:`bayesflow.llm.catalogue`) or interpolated)."""
    return (isinstance(value, str) and bool(value) and not value.startswith(("package:", "models:"))
            and not Path(value).is_absolute() and "${" not in value)


def load_spec(
    source: str | Path | dict[str, Any], overrides: list[str] | None = None
) -> LoadedSpec:
    """Load, override, resolve and validate a workflow spec.

    Args:
        source: a YAML file path, the name of a bundled workflow (``cold_posterior``), or
            an already parsed mapping.
        overrides: Hydra-style ``key=value`` / ``+key=value`` strings.

    Raises:
        SpecError: listing every problem, each with its location and fix.
    """
    overrides = list(overrides or [])
    if isinstance(source, dict):
        path, located, name = None, Located(copy.deepcopy(source)), "<spec>"
    else:
        path = resolve_spec_path(source)
        located, name = _parse_file(path), str(path)
    config = create_config(located.data, located.locations, name)
    apply_overrides(config, overrides, located.locations, name)
    _anchor_override_paths(config, located.locations)
    resolved = resolve_config(config, located.locations, name)
    problems: list[str] = []
    spec: WorkflowSpec | None = None
    try:
        spec = WorkflowSpec.model_validate(resolved)
    except ValidationError as exc:
        problems = format_validation_error(exc, resolved, located.locations, name)
    cross = cross_check(_for_cross_check(resolved))
    if spec is not None and not cross:
        cross = check_data(spec, path.parent if path is not None else Path.cwd())
        cross += _check_template(spec)
    problems += format_cross_problems(cross, located.locations, name)
    if problems or spec is None:
        raise SpecError(problems, name)
    return LoadedSpec(spec, path, resolved, located.locations, overrides)
