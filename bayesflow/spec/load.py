"""Load a workflow spec: read, parse safely, compose, override, resolve, validate.

Every failure raises :class:`~bayesflow.errors.SpecError` listing *all* problems found at
the stage that failed, each with its location (file:line:column or the override), the key
path, what was expected and found, and a close match for a misspelt name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from bayesflow.errors import SpecError
from bayesflow.spec.errors import format_cross_problems, format_validation_error
from bayesflow.spec.locations import Located, Location, YamlProblem, parse_yaml
from bayesflow.spec.models import WorkflowSpec, cross_check
from bayesflow.spec.overrides import apply_overrides

__all__ = ["LoadedSpec", "load_spec", "MAX_SPEC_BYTES"]

# A hand-written spec is a few kilobytes; refusing anything past 1 MiB keeps a stray
# data file passed by mistake from being parsed at all.
MAX_SPEC_BYTES = 1 << 20


@dataclass
class LoadedSpec:
    """A validated spec with what it was made from.

    Attributes:
        spec: the validated model.
        path: the spec file (None when built from a mapping).
        resolved: the resolved plain mapping that was validated.
        locations: where each key path came from.
        overrides: the command-line overrides applied.
    """

    spec: WorkflowSpec
    path: Path | None
    resolved: dict[str, Any]
    locations: dict[tuple[str, ...], Location] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the spec are taken from."""
        return self.path.parent if self.path is not None else Path.cwd()

    def to_yaml(self) -> str:
        """The resolved spec with defaults filled in, as YAML."""
        data = self.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        return OmegaConf.to_yaml(OmegaConf.create(data))


def _read(path: Path) -> str:
    if not path.exists():
        raise SpecError(f"{path}: file not found; check the path", str(path))
    if path.is_dir():
        raise SpecError(f"{path}: is a folder; pass a workflow .yaml file", str(path))
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise SpecError(
            f"{path}: file is {size} bytes, more than the {MAX_SPEC_BYTES} a spec may have; "
            "is this the right file?",
            str(path),
        )
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"{path}:{line}: the file is not UTF-8 (byte {raw[exc.start]:#x} at offset "
            f"{exc.start}); save it as UTF-8",
            str(path),
        ) from None


def _parse_file(path: Path, seen: tuple[Path, ...] = ()) -> Located:
    """Parse ``path`` and, recursively, the base specs it ``extends``."""
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
    base_name = located.data.pop("extends", None)
    if base_name is None:
        return located
    where = located.locations.get(("extends",), Location(str(path)))
    if not isinstance(base_name, str):
        raise SpecError(f"{where}: extends: expected a file name, got {base_name!r}", str(path))
    base_path = (path.parent / base_name).resolve()
    if base_path in seen or base_path == path.resolve():
        raise SpecError(f"{where}: extends: {base_name} is already being extended (a cycle)", str(path))
    if not base_path.exists():
        raise SpecError(f"{where}: extends: base spec {str(base_path)!r} not found", str(path))
    base = _parse_file(base_path, (*seen, path.resolve()))
    merged = OmegaConf.to_container(
        OmegaConf.merge(OmegaConf.create(base.data), OmegaConf.create(located.data)),
        resolve=False,
    )
    locations = {**base.locations, **located.locations}
    return Located(merged, locations)


def _resolve(config: DictConfig, located: Located, source: str) -> dict[str, Any]:
    """Resolve interpolations, reporting every key whose interpolation fails."""
    problems: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
        for key, _ in items:
            child = (*path, str(key))
            try:
                value = node[key]
            except OmegaConfBaseException as exc:
                where = located.locations.get(child, Location(source))
                message = str(exc).split("\n")[0]
                problems.append(f"{where}: {'.'.join(child)}: interpolation failed: {message}")
                continue
            if OmegaConf.is_config(value):
                walk(value, child)

    walk(config, ())
    if problems:
        raise SpecError(problems, source)
    return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]


def load_spec(
    source: str | Path | dict[str, Any], overrides: list[str] | None = None
) -> LoadedSpec:
    """Load, override, resolve and validate a workflow spec.

    Args:
        source: a YAML file path, or an already parsed mapping.
        overrides: Hydra-style ``key=value`` / ``+key=value`` strings.

    Raises:
        SpecError: listing every problem, each with its location and fix.
    """
    overrides = list(overrides or [])
    if isinstance(source, dict):
        path, located = None, Located(dict(source))
        name = "<spec>"
    else:
        path = Path(source)
        located = _parse_file(path)
        name = str(path)
    try:
        config = OmegaConf.create(located.data)
    except OmegaConfBaseException as exc:
        raise SpecError(f"{name}: {exc}", name) from None
    apply_overrides(config, overrides, located.locations, name)
    resolved = _resolve(config, located, name)
    problems = []
    try:
        spec = WorkflowSpec.model_validate(resolved)
    except ValidationError as exc:
        problems = format_validation_error(exc, resolved, located.locations, name)
    problems += format_cross_problems(cross_check(resolved), located.locations, name)
    if problems:
        raise SpecError(problems, name)
    return LoadedSpec(spec, path, resolved, located.locations, overrides)
