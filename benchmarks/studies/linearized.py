"""Peak memory of the linearised (GLM) predictive at IMDB scale (issue 25, item 3).

    python -m benchmarks.studies.linearized                          # this tree, every prediction
    python -m benchmarks.studies.linearized --code /work/main --predictions linearized   # before
    python -m benchmarks.studies.linearized --test 2000 --peer       # + laplace-torch, reduced scale
    python -m benchmarks.studies.linearized --one closed_form --progress 60   # one, in this process

The problem is the paper's IMDB CNN-LSTM (vocabulary 20,000, embedding 128, 64 filters,
LSTM 128, 100 tokens, two classes under a categorical likelihood: d = 2,671,234) with a
diagonal Gaussian posterior around random weights (the memory of a predictive does not depend
on the weights' values) and random token ids as test reviews (the paper: 25,000). Each
prediction runs in a fresh process: after the set-up (model, posterior, inputs) the process's
peak resident set is reset (``/proc/self/clear_refs``), the predictive runs as the evaluate
stage runs it (:func:`bayesflow.evaluate.evaluate_full` on the test reviews with
``evaluate.n_samples`` = 50), and the peak resident set above the set-up's is read from
``VmHWM``. ``--code`` runs another bayesflow tree (main, for the before row); predictions it
does not know are skipped. ``--peer`` adds laplace-torch 0.3's ``pred_type='glm'`` predictive
(probit, its own Jacobians a batch at a time) on the same model, posterior and reviews.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import ROOT

# The paper's IMDB sizes (workflows/cold_posterior_imdb.yaml, its description).
PAPER = {"vocabulary": 20_000, "embedding": 128, "filters": 64, "hidden": 128, "length": 100}
PAPER_TEST = 25_000
SAMPLES = 50
# glibc raises its mmap threshold after a large block is freed (up to 32 MiB), after which
# blocks of a Jacobian's size (2 × d floats = 21.6 MB) come from the heap and fragment it: the
# resident set then creeps up with the number of test points although the live tensors do not
# (measured: 0.8 GB at 50 reviews, 1.25-2.3 GB at 200). A fixed 1 MiB threshold returns every
# large block to the system when it is freed, so the peak resident set is the live tensors'
# peak (0.19 GB at both 50 and 200 reviews); the before and after rows run under it alike.
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**20), "OMP_NUM_THREADS": "1"}
# laplace-torch's predictive takes its Jacobians a batch at a time; the batch it is given.
PEER_BATCH = 32


def _status(field: str) -> int:
    """A ``/proc/self/status`` size field in bytes."""
    with open("/proc/self/status", encoding="ascii") as stream:
        for line in stream:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _problem(test: int) -> tuple[Any, Any, Any, Any]:
    import torch

    from bayesflow.engines.base import Posterior
    from bayesflow.likelihoods import categorical
    from bayesflow.models import cnn_lstm
    from bayesflow.priors import diag_normal
    from bayesflow.problem import build_problem

    torch.manual_seed(0)
    model = cnn_lstm(
        PAPER["length"], 2, vocabulary_size=PAPER["vocabulary"], embedding_size=PAPER["embedding"],
        filters=PAPER["filters"], kernel_size=5, pool_size=4, hidden_size=PAPER["hidden"],
    )
    problem = build_problem(model, categorical(), diag_normal(0.025), 25_000)
    generator = torch.Generator().manual_seed(0)
    mean = problem.init_params(generator)
    # A Laplace variance of the IMDB example's size: T / (curvature + 40) with T = 1.
    posterior = Posterior(mean=mean, var=torch.full_like(mean, 1 / 40))
    inputs = torch.randint(0, PAPER["vocabulary"], (test, PAPER["length"]), generator=generator)
    labels = torch.randint(0, 2, (test,), generator=generator)
    return problem, posterior, inputs, labels


def _peer(problem: Any, posterior: Any, inputs: Any) -> Any:
    """laplace-torch's GLM probit predictive with the same diagonal posterior, batch by batch."""
    import torch
    from laplace import Laplace
    from torch.nn.utils import vector_to_parameters

    model = problem.forward.module
    vector_to_parameters(posterior.mean, model.parameters())
    peer = Laplace(model, "classification", subset_of_weights="all", hessian_structure="diag")
    peer.mean = posterior.mean
    peer.H = 1 / posterior.var - peer.prior_precision  # its posterior variance is ours
    return torch.cat([peer(rows, pred_type="glm", link_approx="probit")
                      for rows in inputs.split(PEER_BATCH)])


def _report_progress(before: int, start: float, counter: list[int], every: float) -> None:
    """Every ``every`` seconds, a JSON line on stderr: the peak so far and the test points the
    moments have reached (a long run killed early still says how far its peak went)."""
    import threading

    def loop() -> None:
        while True:
            time.sleep(every)
            line = {"elapsed": time.perf_counter() - start, "peak_bytes": _status("VmHWM") - before,
                    "rows": counter[0]}
            print(json.dumps(line), file=sys.stderr, flush=True)

    threading.Thread(target=loop, daemon=True).start()


def measure(prediction: str, test: int, progress: float = 0.0) -> dict[str, Any]:
    """One prediction in this process: its peak resident memory above the set-up, and time."""
    import dataclasses

    import torch

    torch.set_num_threads(1)
    problem, posterior, inputs, labels = _problem(test)
    counter = [0]
    if progress:
        forward = problem.forward

        def counted(params: Any, rows: Any) -> Any:
            counter[0] += 1
            return forward(params, rows)

        problem = dataclasses.replace(problem, forward=counted)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as stream:
        stream.write("5")  # reset VmHWM to the current resident set
    before = _status("VmRSS")
    start = time.perf_counter()
    if progress:
        _report_progress(before, start, counter, progress)
    if prediction == "laplace_torch":
        _peer(problem, posterior, inputs)
        metrics: dict[str, float] = {}
    else:
        from bayesflow.evaluate import evaluate_full
        from bayesflow.likelihoods import categorical

        metrics = evaluate_full(problem, categorical(), posterior, inputs, labels, SAMPLES,
                                torch.Generator().manual_seed(1), prediction=prediction).metrics
    seconds = time.perf_counter() - start
    return {
        "prediction": prediction, "test": test, "dimension": problem.dimension,
        "peak_bytes": _status("VmHWM") - before, "seconds": seconds,
        "budget": os.environ.get("BAYESFLOW_MEMORY_LIMIT", "half the free memory"),
        "test_nll": metrics.get("test_nll"),
    }


def run(predictions: list[str], test: int, code: Path) -> list[dict[str, Any]]:
    """Each prediction in a fresh process on the bayesflow tree ``code``."""
    rows = []
    for prediction in predictions:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.studies.linearized", "--one", prediction, "--test", str(test),
             "--code", str(code)],
            cwd=ROOT, env={**os.environ, **MALLOC}, capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            rows.append({"prediction": prediction, "test": test, "failed": done.stderr[-1500:]})
            continue
        rows.append({**json.loads(done.stdout.strip().splitlines()[-1]), "code": str(code)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the bayesflow tree to measure")
    parser.add_argument("--test", type=int, default=PAPER_TEST, help="test reviews")
    parser.add_argument("--predictions", nargs="+",
                        default=["linearized", "closed_form", "linearized_mc"])
    parser.add_argument("--peer", action="store_true", help="add laplace-torch's glm predictive")
    parser.add_argument("--progress", type=float, default=0.0,
                        help="with --one: seconds between progress lines on stderr")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        sys.path.insert(0, str(arguments.code.resolve()))  # bayesflow from the tree measured
        print(json.dumps(measure(arguments.one, arguments.test, arguments.progress)))
        return
    predictions = arguments.predictions + (["laplace_torch"] if arguments.peer else [])
    for row in run(predictions, arguments.test, arguments.code):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
