"""``python -m benchmarks.speed.kfac.memory ENGINE LIBRARY DEVICE``: the peak memory of one fit.

Run in a fresh process: the data, the model and the library are loaded and one fit runs
untimed (imports, and one-time costs of the process: the first autograd call alone raised
the resident set by 33 MiB, measured), then the measured fit runs. On the CPU a thread reads
the resident set size (``/proc/self/statm``) every half millisecond while the fit runs,
and the figure is its largest value less its value before the fit (the process's
high-water mark, ``ru_maxrss``, may have been set by the data loading, so it cannot tell
a fit's peak). On a GPU it is ``torch.cuda.max_memory_allocated`` over the fit less what
was allocated when it began. Prints one JSON line ``{"peak_bytes": ...}``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time

import torch

PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_SECONDS = 0.0005


def resident_bytes() -> int:
    """The process's resident set size now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def main(engine_name: str, library: str, device: str) -> int:
    """The bytes one fit adds to the process's memory at its peak."""
    from benchmarks.common.problems import digits
    from benchmarks.speed.kfac.case import bayesflow_fit, laplace_torch_fit

    torch.set_num_threads(1)
    setup = digits(device)
    build = bayesflow_fit if library == "bayesflow" else laplace_torch_fit
    fit = build(setup, engine_name)
    fit()
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fit()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before)
    before = resident_bytes()
    peak = [before]
    running = threading.Event()
    running.set()

    def poll() -> None:
        while running.is_set():
            peak[0] = max(peak[0], resident_bytes())
            time.sleep(POLL_SECONDS)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    result = fit()
    peak[0] = max(peak[0], resident_bytes())
    running.clear()
    poller.join()
    del result
    return peak[0] - before


if __name__ == "__main__":
    print(json.dumps({"peak_bytes": main(*sys.argv[1:4])}))
