"""A fitted language-model posterior inside lm-evaluation-harness: its loglikelihood is the
members' mixture computed with transformers' own forward, one member is the plain model,
is_greedy reads the members' mean, the command line prints lm-eval's table and bayesflow's
ECE, and bad tasks and posteriors are named errors. No network: the tasks are YAML and
JSONL written here (``dataset_path: json``), the model the shipped byte-level checkpoint."""

from __future__ import annotations

import importlib
import json
import math
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

pytest.importorskip("lm_eval")

import bayesflow
from bayesflow.errors import MissingDependencyError, TaskError
from bayesflow.evaluate import draw_samples
from bayesflow.evaluate.metrics import accuracy, ece
from bayesflow.llm.source import check_folder
from bayesflow.posterior import PosteriorError
from bayesflow.posterior.continuations import continuation_scores, mean_log_probability
from bayesflow.tracking import InMemoryTracker
from tests.llm.spec_helpers import DOCUMENTS, lm_spec, write_spec

QUESTIONS = [
    {"question": "What colour is a clear sky?", "choices": ["blue", "green", "red"], "answer": 0},
    {"question": "How many legs has a cat?", "choices": ["two", "four", "six"], "answer": 1},
    {"question": "What do bees make?", "choices": ["milk", "silk", "honey"], "answer": 2},
    {"question": "Which is a fruit?", "choices": ["apple", "brick", "chair"], "answer": 0},
]


class Request:
    """What lm-eval hands a model: an object with ``args``."""

    def __init__(self, *args: str) -> None:
        self.args = args


def write_task(folder: Path, name: str = "tiny_mc", **overrides: Any) -> Path:
    """A multiple-choice task YAML over a JSONL of :data:`QUESTIONS`, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(question) + "\n" for question in QUESTIONS))
    config = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
              "test_split": "test", "output_type": "multiple_choice",
              "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_choice": "{{choices}}",
              "doc_to_target": "{{answer}}", "metric_list": [{"metric": "acc"}]}
    config.update(overrides)
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run on the shipped byte-level checkpoint (its folder tokenizer), LoRA on the last
    layer: MAP (one member) and 2-chain SGHMC, each written as a posterior folder."""
    folder = tmp_path_factory.mktemp("lm_eval_run")
    spec = lm_spec(folder)
    spec["model"] = {"name": "causal_lm", "path": "package:lm/checkpoint",
                     "trainable": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"],
                                            "layers": [-1]}}}
    spec["data"]["tokenizer"] = "model"
    spec["methods"]["sghmc"] = {"engine": "sghmc", "lr": 0.001, "epochs": 1, "batch_size": 8, "chains": 2}
    spec["execution"] = {"cache_dir": str(folder / "cache")}
    loaded = bayesflow.load(write_spec(folder, spec))
    result = bayesflow.run(loaded, tracker=InMemoryTracker(folder / "artifacts"))
    assert result.exit_code == 0, result.outcome.errors
    found = {}
    for fitted_file in (folder / "cache").rglob("posterior.npz"):
        with np.load(fitted_file) as arrays:
            method = "sghmc" if "samples" in arrays.files else "map"
        target = folder / method
        target.mkdir()
        shutil.copy(fitted_file, target / "posterior.npz")
        (target / "resolved.yaml").write_text(loaded.to_yaml())
        for name in DOCUMENTS:
            shutil.copy(folder / name, target / name)
        found[method] = target
    assert sorted(found) == ["map", "sghmc"]
    return found


def _tokenizer() -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(check_folder("package:lm/checkpoint")))


def _split(context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's convention by hand: the context's trailing spaces go to the continuation,
    the pair is encoded whole, the continuation is what follows the context's tokens."""
    tokenizer = _tokenizer()
    stripped = context.rstrip()
    continuation = context[len(stripped):] + continuation
    whole = tokenizer(stripped + continuation, add_special_tokens=False)["input_ids"]
    own = tokenizer(stripped, add_special_tokens=False)["input_ids"]
    return own, whole[len(own):]


def _member_log_probs(models: list[Any], context: list[int], continuation: list[int]) -> np.ndarray:
    """Each model's summed log-probability of ``continuation`` after ``context`` (the
    model reads both but the last token)."""
    ids = torch.tensor([(context + continuation)[:-1]])
    sums = []
    for model in models:
        with torch.no_grad():
            logits = model(ids).logits[0].double().log_softmax(-1)
        positions = range(len(context) - 1, len(context) + len(continuation) - 1)
        sums.append(sum(float(logits[position, token]) for position, token in zip(positions, continuation)))
    return np.asarray(sums)


@pytest.mark.slow
def test_loglikelihood_is_the_members_mixture_by_transformers(fitted: dict[str, Path]) -> None:
    """log p̄(continuation | context) = logsumexp over members of each member's summed
    log-probability (transformers' forward of the model with the member's adapters) − log M."""
    from bayesflow.posterior.harness import PosteriorLM

    lm = PosteriorLM(str(fitted["sghmc"]), members=3, seed=1)
    posterior = lm.posterior
    assert torch.equal(lm.members, draw_samples(posterior.posterior, 3, torch.Generator().manual_seed(1)))
    # One epoch of SGHMC moves the adapters little (the members' log-probabilities agree to
    # 1e-3 nats, where a mixture and a mean of logs differ by 1e-7): spread them apart.
    lm.members = lm.members + 0.3 * torch.randn(lm.members.shape, generator=torch.Generator().manual_seed(2))
    models = [posterior.module(member) for member in lm.members]
    pairs = [("Question: What do bees make?\nAnswer:", " honey"), ("The quick brown ", "fox jumps"),
             ("0123", "45678")]
    answers = lm.loglikelihood([Request(*pair) for pair in pairs])
    for (context, continuation), (value, _) in zip(pairs, answers):
        own, rest = _split(context, continuation)
        each = _member_log_probs(models, own, rest)
        assert value == pytest.approx(logsumexp(each) - math.log(3), abs=1e-4)
        assert abs(value - each.mean()) > 1e-2  # the members differ: a mixture, not a mean of logs


@pytest.mark.slow
def test_a_one_member_posterior_is_the_plain_models_log_prob(fitted: dict[str, Path]) -> None:
    """MAP is one member: loglikelihood is the adapted model's log-probability, an empty
    context reads the prefix token (a newline: the checkpoint has no BOS), and
    loglikelihood_rolling of a text past the 512-token context is lm-eval's two windows."""
    from bayesflow.posterior.harness import PosteriorLM

    lm = PosteriorLM(str(fitted["map"]))
    assert lm.members.shape[0] == 1 and lm.max_length == 512 and lm.prefix_token_id == 10
    model = lm.posterior.module()
    (value, _), (empty, _) = lm.loglikelihood([Request("The bees", " swarmed."), Request("", "hive")])
    assert value == pytest.approx(float(_member_log_probs([model], *_split("The bees", " swarmed."))[0]), abs=1e-4)
    assert empty == pytest.approx(float(_member_log_probs([model], [10], list(b"hive"))[0]), abs=1e-4)
    text = "".join(DOCUMENTS.values())[:600]
    tokens = list(text.encode())
    first = _member_log_probs([model], [10], tokens[:512])[0]  # [prefix] + 511 tokens predict 512
    second = _member_log_probs([model], tokens[87:512], tokens[512:600])[0]  # 512 inputs, the last 88 scored
    (rolling,) = lm.loglikelihood_rolling([Request(text)])
    assert rolling == pytest.approx(first + second, abs=1e-3)


def _constructed_problem(table: torch.Tensor) -> Any:
    """A problem whose member θ (one number, its row of ``table``) gives next-token logits
    log ``table[θ]`` at every position: the members' distributions chosen by hand."""
    def logits(params: torch.Tensor, inputs: torch.Tensor, keep: int) -> torch.Tensor:
        row = table[params[0].long()].log()
        return row.expand(inputs.shape[0], keep, -1)

    return SimpleNamespace(logits=logits, device=torch.device("cpu"),
                           module=SimpleNamespace(config=SimpleNamespace(vocab_size=table.shape[1])))


def test_is_greedy_is_the_argmax_of_the_members_mean() -> None:
    """Member A says [0.6, 0.4, 0], member B [0, 0.4, 0.6]: the mean [0.3, 0.4, 0.3] picks
    token 1, which neither member would; the log-probabilities are each member's sums."""
    table = torch.tensor([[0.6, 0.4, 1e-30], [1e-30, 0.4, 0.6]], dtype=torch.float64)
    problem = _constructed_problem(table)
    members = torch.tensor([[0.0], [1.0]])
    pieces = [(np.array([2, 1, 1]), 1), (np.array([2, 0]), 1), (np.array([2, 1, 2]), 1), (np.array([2]), 1)]
    scores = continuation_scores(problem, members, pieces)
    assert scores.greedy.tolist() == [True, False, False, True]  # no scored token: vacuously greedy
    expected = np.log([[0.4 * 0.4, 0.6, 0.4 * 1e-30, 1.0], [0.4 * 0.4, 1e-30, 0.4 * 0.6, 1.0]])
    np.testing.assert_allclose(scores.log_probs, expected, rtol=1e-9)
    np.testing.assert_allclose(mean_log_probability(scores.log_probs), logsumexp(expected, axis=0) - math.log(2))


def _run_cli(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayesflow.cli", "lm-eval", *arguments], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_the_command_prints_lm_evals_table_and_bayesflows_ece(fitted: dict[str, Path], tmp_path: Path) -> None:
    """``bayesflow lm-eval FOLDER --tasks tiny_mc --include-path DIR`` exits 0, prints
    lm-eval's acc and bayesflow's ECE, and writes per-document choice probabilities whose
    metrics are the printed ones; lm-eval's acc is the argmax of the same probabilities."""
    write_task(tmp_path / "tasks")
    start = time.perf_counter()
    result = _run_cli(str(fitted["sghmc"]), "--tasks", "tiny_mc", "--include-path", str(tmp_path / "tasks"),
                      "--members", "2", "--limit", "3", "--output", str(tmp_path / "out.json"), cwd=tmp_path)
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    assert "|tiny_mc|" in result.stdout and "|acc" in result.stdout
    assert "ECE (10 bins)" in result.stdout and "2 posterior members" in result.stdout
    saved = json.loads((tmp_path / "out.json").read_text())
    row = saved["bayesflow"]["calibration"]["tiny_mc"]
    probabilities, labels = np.asarray(row["probabilities"]), np.asarray(row["labels"])
    assert probabilities.shape == (3, 3) and labels.tolist() == [0, 1, 2]  # --limit 3 of the 4
    np.testing.assert_allclose(probabilities.sum(1), 1.0)
    assert row["ece"] == pytest.approx(ece(probabilities, labels, bins=10))
    assert saved["lm_eval"]["results"]["tiny_mc"]["acc,none"] == pytest.approx(accuracy(probabilities, labels))
    assert f"{row['ece']:.4f}" in result.stdout
    print(f"bayesflow lm-eval on 3 questions of a task, 2 members: {seconds:.1f} s")


@pytest.mark.slow
def test_a_generate_task_and_generate_until_are_named_errors(fitted: dict[str, Path], tmp_path: Path) -> None:
    """A generate_until task is refused before the model is built (exit 2, its file named),
    and the model's generate_until says what bayesflow scores."""
    from bayesflow.posterior.harness import PosteriorLM

    path = write_task(tmp_path / "tasks", "tiny_gen", output_type="generate_until", doc_to_choice=None,
                      generation_kwargs={"until": ["\n"]}, metric_list=[{"metric": "exact_match"}])
    result = _run_cli(str(fitted["map"]), "--tasks", "tiny_gen", "--include-path", str(tmp_path / "tasks"),
                      cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"task 'tiny_gen' ({path}) is a generate_until task" in " ".join(result.stderr.split())
    with pytest.raises(TaskError, match="does not generate"):
        PosteriorLM(str(fitted["map"])).generate_until([Request("Q:", "{}")])


@pytest.mark.slow
def test_task_files_lm_eval_cannot_read_are_named(tmp_path: Path) -> None:
    """A YAML syntax error (lm-eval's index skips the file silently), an unknown output
    type and a missing data file: each a TaskError naming the file and lm-eval's reason."""
    from bayesflow.posterior.harness_tasks import load_task_manager

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad.yaml").write_text(textwrap.dedent("""\
        task: broken
        dataset_path: json
          output_type: [
        """))
    with pytest.raises(TaskError, match=r"lm-eval cannot read 1 task file.*bad\.yaml: (ScannerError|ParserError)"):
        load_task_manager(["broken"], broken)
    typo = write_task(tmp_path / "typo", "typo_task", output_type="multiple_choise")
    with pytest.raises(TaskError, match=rf"task 'typo_task' \({typo}\): lm-eval cannot load it: ValueError: Got "
                                        r"invalid output_type 'multiple_choise'"):
        load_task_manager(["typo_task"], tmp_path / "typo")
    gone = write_task(tmp_path / "gone", "gone_task", dataset_kwargs={"data_files": {"test": str(tmp_path / "no.jsonl")}})
    with pytest.raises(TaskError, match=rf"task 'gone_task' \({gone}\): lm-eval cannot load it: FileNotFoundError"):
        load_task_manager(["gone_task"], tmp_path / "gone")


def test_a_posterior_that_is_not_a_language_model_is_refused(tiny_spec: Path) -> None:
    """The posterior of an MLP on digits is a PosteriorError naming its model, before any
    model is built."""
    from bayesflow.engines.base import Posterior
    from bayesflow.posterior import FittedPosterior
    from bayesflow.posterior.harness import PosteriorLM

    spec = bayesflow.load(tiny_spec).spec
    fitted = FittedPosterior(Posterior(mean=torch.zeros(3), var=torch.zeros(3)), spec, {}, ())
    with pytest.raises(PosteriorError, match="this run's model is 'mlp' .* pass the fit of a run whose model is `causal_lm`"):
        PosteriorLM(fitted)


def test_without_lm_eval_the_message_is_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the harness without lm-eval raises MissingDependencyError with the extra's
    install command."""
    for name in [name for name in sys.modules if name == "lm_eval" or name.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # type: ignore[arg-type]  # import finds nothing
    monkeypatch.delitem(sys.modules, "bayesflow.posterior.harness", raising=False)
    with pytest.raises(MissingDependencyError, match=r"install it with `pip install 'bayesflow-workflows\[lmeval\]'`"):
        importlib.import_module("bayesflow.posterior.harness")


@pytest.mark.slow
def test_a_multiple_choice_runs_posterior_with_byte_tokens(tmp_path: Path) -> None:
    """A MAP fit of multiple-choice questions on a config-built Llama read as bytes: its
    posterior scores continuations as the adapted model does, an empty context being a
    newline (the config's default BOS id 1 is a control byte)."""
    from bayesflow.posterior.harness import PosteriorLM
    from tests.llm.test_multiple_choice import choice_spec

    loaded = bayesflow.load(write_spec(tmp_path, {**choice_spec(tmp_path),
                                                  "execution": {"cache_dir": str(tmp_path / "cache")}}))
    result = bayesflow.run(loaded, tracker=InMemoryTracker(tmp_path / "artifacts"))
    assert result.exit_code == 0, result.outcome.errors
    (fitted_file,) = (tmp_path / "cache").rglob("posterior.npz")
    folder = tmp_path / "posterior"
    folder.mkdir()
    shutil.copy(fitted_file, folder / "posterior.npz")
    (folder / "spec.yaml").write_text(loaded.to_yaml())
    shutil.copy(tmp_path / "questions.jsonl", folder / "questions.jsonl")
    lm = PosteriorLM(folder)
    assert lm.prefix_token_id == 10 and lm.max_length == 128
    model = lm.posterior.module()
    pairs = [("Question: Which is a gas?\nAnswer:", " B"), ("", "Oxygen")]
    context = [list(b"Question: Which is a gas?\nAnswer:"), [10]]
    answers = lm.loglikelihood([Request(*pair) for pair in pairs])
    for (_, continuation), own, (value, _) in zip(pairs, context, answers):
        assert value == pytest.approx(float(_member_log_probs([model], own, list(continuation.encode()))[0]), abs=1e-4)
