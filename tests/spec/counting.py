"""A stand-in module that counts what the spec loader took from it: how much it read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Counting:
    """Stands in for a module that a spec loader module imported (``os``, ``yaml``),
    passing everything through while counting what the loader took from it: the bytes
    ``os.read`` returned, the events ``yaml.parse`` yielded, the calls of ``yaml.compose``."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.bytes_read = self.events = self.composed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def read(self, descriptor: int, size: int) -> bytes:
        chunk = self.module.read(descriptor, size)
        self.bytes_read += len(chunk)
        return chunk

    def parse(self, *args: Any, **options: Any) -> Iterator[Any]:
        for event in self.module.parse(*args, **options):
            self.events += 1
            yield event

    def compose(self, *args: Any, **options: Any) -> Any:
        self.composed += 1
        return self.module.compose(*args, **options)
