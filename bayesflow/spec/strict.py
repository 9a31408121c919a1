"""The base of every spec model (torch-free): unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    """Base of every spec model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
