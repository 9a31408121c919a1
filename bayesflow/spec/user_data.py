"""The spec of a user's own dataset (``data: {name: python}``), torch-free: a member of the
``data`` union of :mod:`bayesflow.spec.blocks`, loaded by :mod:`bayesflow.data.python`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from bayesflow.spec.strict import Strict

__all__ = ["PythonDataSpec"]


class PythonDataSpec(Strict):
    """Your own dataset, returned by a function in your code. This runs your code.

    Every key besides `name`, `module` and `function` is passed to the function as a
    keyword argument.
    """

    # Open keys, as the python model's: they are the function's own arguments.
    model_config = ConfigDict(extra="allow")

    name: Literal["python"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "features"
    module: str = Field(
        description="A `.py` file (relative to the spec file) or an importable module name. "
        "bayesflow executes it and calls `function(**the other keys of data)`: this runs your "
        "code. The data's digest covers the module's source, so editing it recomputes every stage."
    )
    function: str = Field(
        "load",
        description="The function to call. It returns `(x_train, y_train, x_test, y_test)` "
        "with an optional fifth `x_ood` (out-of-distribution inputs), or a mapping with those "
        "keys and optionally `x_validation` with `y_validation` (rows held out of training: "
        "every fit logs `val_*` metrics on them and the report chooses the best temperature "
        "on them): inputs rows × features, targets 1-D (integer labels 0..K-1 for "
        "classification, real values for `gaussian`).",
    )

    @field_validator("function")
    @classmethod
    def _identifier(cls, function: str) -> str:
        if not function.isidentifier():
            raise ValueError(f"expected the name of a function, such as `load`; got {function!r}")
        return function

    @model_validator(mode="after")
    def _reserved_keys(self) -> PythonDataSpec:
        if "base_dir" in (self.model_extra or {}):
            raise ValueError("base_dir is set by bayesflow (the spec's folder); remove it from data")
        return self
