"""What the report stage tells the header: version, commit, date, machine, device."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from bayesflow.spec.load import load_spec
from bayesflow.stages.report import report_parameters, resolved_device
from bayesflow.tracking.hook import process_tags


def test_report_parameters_carry_the_run_environment(tmp_path: Path) -> None:
    """The version and commit are the tags every MLflow run carries; the machine names
    the host and its CPU count; a CPU spec's device is `cpu`."""
    parameters = report_parameters(load_spec("cold_posterior"), tmp_path)
    info = parameters["run_info"]
    assert isinstance(info, dict)
    tags = process_tags()
    assert info["version"] == tags["bayesflow.version"]
    assert info["commit"] == tags.get("mlflow.source.git.commit", "")
    assert info["machine"].startswith(f"{socket.gethostname()} ({os.cpu_count()} CPUs, ")
    assert info["device"] == "cpu" and info["rendered"].endswith(" UTC")
    assert parameters["plots"] == list(load_spec("cold_posterior").spec.plots)


def test_auto_resolves_to_the_device_torch_sees() -> None:
    """`auto` is `cuda:<name>` where torch sees a GPU, else `cpu`."""
    import torch

    expected = f"cuda:{torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu"
    assert resolved_device("auto") == expected
    assert resolved_device("cpu") == "cpu"
