"""docs/extending.md, followed literally: a fourth framework ("toy", numpy only: its new files in
tests/extending/), a workload only it has a model of, a knob that only it implements and a
metric it reads, added to a fresh clone by the doc's steps and run there through the plan, the
worker, the record, `membench list --matrix`, asv's catalogue and the contract tests the doc
names. The files the clone had to touch are the files the doc's "A framework", "A workload",
"A strategy" and "A metric" steps name (their `Touches` lines, placeholders filled): a step the
doc lacks, or one it names that is not needed, fails here, so the doc cannot drift."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, fresh_clone

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "tests" / "extending"  # the new files, laid out as in the repository
PLACEHOLDERS = {
    "<name>": "toy",
    "<stem>": "toy",
    "<workload>": "transformer",
    "<knob>": "toy_knob",
}
KNOB, STRATEGY, METRIC, WORKLOAD = "toy_knob", "infer-toy", "toy_parameter_arrays", "bigram"
# a section's own placeholders, over PLACEHOLDERS
SECTION_PLACEHOLDERS = {"A workload": {"<workload>": WORKLOAD}}
# The conditional steps ("Touches, where ..."): which hold for this framework, knob, strategy
# and metric
CONDITIONS = {
    "where its readings are not the default": False,  # the toy's device peak: the default
    "where its distribution is not installed yet": False,  # numpy
    "where the session calls something new of it": False,  # the bigram: the toy's contract
    "where a GPU preset runs it": False,  # smoke only
    "where a committed run records it": False,
    "where it adds a knob": True,
    "where its name matches no rule": False,  # infer-toy: the inference family's rule
    "where the step branches for every framework": False,  # only the toy runs it
    "where the model modules run it": False,  # the toy's session halves the batch
    "where a framework reads it": True,  # the toy's Readings
    "where every framework has it": False,
    "where asv tracks it": True,
    "where asv tracks it and lower is not better": True,  # a count, higher is better
}


def edit(path: Path, anchor: str, new: str, before: bool = False) -> None:
    """Insert new after (or before) the one occurrence of anchor in path."""
    text = path.read_text()
    assert text.count(anchor) == 1, (path, anchor)
    path.write_text(text.replace(anchor, new + anchor if before else anchor + new))


def touches(section: str, placeholders: dict[str, str]) -> tuple[set[str], set[str], set[str]]:
    """The files a section's steps name: (those this example must touch, those it must not,
    the conditions the steps write)."""
    needed, not_needed, conditions = set(), set(), set()
    for paragraph in re.findall(r"^ *(Touches.*?)(?=\n\s*\n|\n\d+\. |\Z)", section, re.M | re.S):
        for clause in re.split(r"(?=Touches)", " ".join(paragraph.split())):
            if not clause:
                continue
            head, _, files = clause.partition(":")
            condition = head.removeprefix("Touches").strip(" ,")
            paths = {fill(p, placeholders) for p in re.findall(r"`([^`]+)`", files)}
            if condition.startswith("where"):
                conditions.add(condition)
            applies = CONDITIONS[condition] if condition.startswith("where") else True
            (needed if applies else not_needed).update(paths)
    return needed, not_needed, conditions


def fill(path: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        path = path.replace(placeholder, value)
    return path


def section(doc: str, title: str) -> str:
    return doc.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def run(root: Path, *args: str, timeout: int = 300) -> str:
    out = subprocess.run(
        [str(root / ".venv" / "bin" / "python"), *args],
        cwd=root, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
    return out.stdout


def git(root: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout


def add_framework(root: Path) -> None:
    """A framework's steps 1-7 (8, the generated files, after the others'); a framework
    whose readings are the default and whose distribution is installed skips 3 and 4."""
    for source in EXAMPLE.rglob("*.py"):  # 1 (the backend folder) and 5 (the model modules)
        if WORKLOAD in source.parts:
            continue  # the workload's steps
        target = root / source.relative_to(EXAMPLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    edit(  # 2: the registration
        root / "membench/registry/frameworks.py",
        "\n\ndef framework(name: str) -> Framework:",
        '\nregister_framework(\n    Framework(\n        "toy", "Toy (numpy)", '
        '"membench.backends.toy_backend:ToyBackend", "numpy",\n        libraries=("numpy",), '
        "cpu_cell_seconds=3.0,\n    )\n)\n",
        before=True,
    )
    edit(  # 6: its models' contract
        root / "models/contract.py",
        "\n\nclass WithAttention(Protocol):",
        "\n\nclass ToyModelModule(ModelModule, Protocol):\n"
        "    def make_optimizer(self) -> Any: ...\n\n"
        "    def forward(self, model: Any, tokens: np.ndarray, /) -> Any: ...\n\n"
        "    def step(self, model: Any, optimizer: Any, x: Any, y: Any, /) -> None: ...\n",
        before=True,
    )
    edit(
        root / "models/contract.py", '"jittor": JittorModelModule,', '\n    "toy": ToyModelModule,'
    )
    probes = root / "tests/session_probes.py"  # 7: the parity tests' probes
    edit(
        probes,
        "\n\nGRADIENTS = {",
        "\n\ndef toy_logits(s: Any) -> np.ndarray:\n"
        "    return s.module.forward(s.model, s.batches[0][0])\n\n\n"
        "def toy_gradients(s: Any, train_bn: bool = True) -> dict[str, np.ndarray]:\n"
        "    before = s.model['out'].copy()\n"
        "    s.module.step(s.model, s.optimizer, *s.batches[0])\n"
        "    after, s.model['out'] = s.model['out'], before\n"
        "    return {'out': (before - after) / s.optimizer['lr']}\n",
        before=True,
    )
    edit(probes, '"jittor": jittor_gradients', ', "toy": toy_gradients')
    edit(probes, '"jittor": jittor_logits', ', "toy": toy_logits')


def add_workload(root: Path) -> None:
    """A workload's steps 1-5 (6, the generated files, with the others'): a bigram model that
    only the toy framework has a module for, run by the smoke preset alone, with no memory
    model (its spec has none of the model's inputs)."""
    for source in (EXAMPLE / "models" / WORKLOAD).glob("*.py"):  # 1 and 2: spec, model module
        target = root / source.relative_to(EXAMPLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    edit(  # 3: its registry entry
        root / "membench/registry/workloads.py",
        "    ]\n}\n\n\ndef register_workload",
        f'        Workload("{WORKLOAD}", "a bigram language model"),\n',
        before=True,
    )
    edit(  # 4: its sizes in the smoke preset
        root / "membench/registry/presets.py",
        '                "transformer": WorkloadSize((4,), TRANSFORMER_TINY),\n',
        f'                "{WORKLOAD}": WorkloadSize((4,), TRANSFORMER_TINY),\n',
    )
    (root / f"tests/test_{WORKLOAD}.py").write_text(  # 5: its test
        '"""The bigram model learns: one step lowers its loss on the batch."""\n\n'
        "from membench import registry\n"
        f"from models.{WORKLOAD} import spec, toy_impl\n\n\n"
        "def test_a_step_lowers_the_loss():\n"
        f"    inputs = registry.preset('smoke').size('{WORKLOAD}').inputs\n"
        "    model, optimizer = toy_impl.build(inputs), toy_impl.make_optimizer()\n"
        "    x, y = spec.synthetic_batch(4, inputs, 0)\n"
        "    before = toy_impl.loss_fn(toy_impl.forward(model, x), y)\n"
        "    toy_impl.step(model, optimizer, x, y)\n"
        "    assert toy_impl.loss_fn(toy_impl.forward(model, x), y) < before\n"
    )


def add_knob(root: Path) -> None:
    """A strategy's steps 1-5: an inference knob that the toy framework alone runs."""
    knobs = root / "membench/registry/knobs.py"
    edit(knobs, '    sharding: Sharding = "none"\n', f"    {KNOB}: bool = False\n")
    edit(
        knobs,
        '            "lengths": self.lengths != "fixed",\n',
        f'            "{KNOB}": self.{KNOB},\n',
    )
    edit(
        root / "membench/registry/strategies.py",
        "    ]\n}\nSHARDING_STRATEGIES",
        f'        Strategy("{STRATEGY}", "inference over two halves of the batch", mode="infer",'
        f" {KNOB}=True),\n",
        before=True,
    )
    toy = root / "membench/backends/toy_backend"
    edit(
        toy / "support.py",
        '    "mode": {"infer": Implemented("the numpy forward alone")},\n',
        f'    "{KNOB}": {{True: Implemented("the forward over each half of the batch")}},\n',
    )
    edit(
        toy / "session.py",
        "        x, _ = self.batches[0]\n",
        f"        if self.strategy.{KNOB}:\n"
        "            halves = [x[: len(x) // 2], x[len(x) // 2 :]]\n"
        "            self.output = [self.module.forward(model or self.model, h) for h in halves]\n"
        "            return\n",
    )
    (root / f"tests/test_{KNOB}.py").write_text(
        '"""The toy knob computes the baseline\'s function."""\n\n'
        "import numpy as np\n\n"
        "from membench import registry\n"
        "from membench.backends import BuildSpec\n"
        "from membench.registry import load_backend\n\n\n"
        "def test_the_halves_are_the_whole_batch():\n"
        "    size = registry.preset('smoke').size('transformer')\n"
        "    outputs = []\n"
        f"    for name in ('infer', '{STRATEGY}'):\n"
        "        spec = BuildSpec('transformer', registry.strategy(name), size, 2)\n"
        "        session = load_backend('toy').build(spec)\n"
        "        session.step()\n"
        "        out = session.output\n"
        "        outputs.append(np.concatenate(out) if isinstance(out, list) else out)\n"
        "    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-6)\n"
    )
    edit(  # 4: how the memory model counts it
        root / "membench/memory/memory_model.py",
        "UNMODELLED_KNOBS = {\n",
        f'    "{KNOB}": "two halves of the batch: no more than the whole batch holds",\n',
    )
    edit(
        root / "tests/test_committed_workloads.py",
        "ADDED_AFTER_THE_RUNS = (\n",
        f'    "{STRATEGY}",  # the toy knob (tests/test_extending.py)\n',
    )


def add_metric(root: Path) -> None:
    """A metric's steps 1-3 (3's catalogue with the others' generated files): a count the toy
    framework reads, tracked by asv, higher being better."""
    edit(
        root / "membench/metrics.py",
        "\n]  # fmt: skip\n\n# -- multi-rank cells",
        f'\n    Metric("{METRIC}", "model", "count", "toy: parameter arrays", "higher",'
        f' asv="track_{METRIC}"),',
        before=True,
    )
    edit(
        root / "membench/backends/toy_backend/readings.py",
        "\n    def framework_notes(self)",
        f"\n    def memory(self) -> dict[str, float]:\n"
        f'        return {{"{METRIC}": float(len(self.session.model))}}\n',
        before=True,
    )
    edit(root / "asv.conf.json", "track_(throughput|", f"{METRIC}|")


def regenerate(root: Path) -> None:
    """Both sections' last step: the strategy table and asv's catalogue, by the doc's commands."""
    table = run(root, "-m", "membench", "list", "--matrix", "--markdown")
    doc = root / "docs/methodology.md"
    start, end = "<!-- support-matrix:start -->\n", "<!-- support-matrix:end -->"
    text = doc.read_text()
    head, rest = text.split(start)
    doc.write_text(head + start + table + end + rest.split(end, 1)[1])
    git(root, "checkout", "-qB", "main")  # the branch asv.conf.json names
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the toy framework and knob")
    from membench.publish.asv_run import asv_commands

    describe, _ = asv_commands("test-machine", "")
    python = str(root / ".venv" / "bin" / "python")
    subprocess.run([python, *describe[1:]], cwd=root, check=True, capture_output=True)
    run(root, "-m", "asv", "run", "--bench", "just-discover", "--set-commit-hash", "HEAD",
        "--machine", "test-machine")  # fmt: skip
    shutil.rmtree(root / "results" / "asv" / "test-machine", ignore_errors=True)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = fresh_clone(tmp_path_factory, "asv")
    with (root / ".git" / "info" / "exclude").open("a") as f:
        f.write(".venv\n")  # the clone's install (a link to this one's), not a step's file
    base = git(root, "rev-parse", "HEAD").strip()
    add_framework(root)
    add_workload(root)
    add_knob(root)
    add_metric(root)
    regenerate(root)
    touched = git(root, "diff", "--name-only", base, "HEAD").split()
    touched += git(root, "ls-files", "--others", "--exclude-standard", "--modified").split()
    return root, set(touched)


def test_the_files_touched_are_the_files_the_doc_names(clone):
    root, touched = clone
    doc = (REPO / "docs" / "extending.md").read_text()
    needed, not_needed, conditions = set(), set(), set()
    for title in ("A framework", "A workload", "A strategy", "A metric"):
        placeholders = {**PLACEHOLDERS, **SECTION_PLACEHOLDERS.get(title, {})}
        n, nn, c = touches(section(doc, title), placeholders)
        needed, not_needed, conditions = needed | n, not_needed | nn, conditions | c
    assert conditions == set(CONDITIONS)  # every condition the doc writes is decided above
    assert touched == needed
    # (a file one step needs may be named by another step's case that does not hold here)
    assert not touched & (not_needed - needed)


def test_a_toy_cell_runs_through_the_worker_and_the_rest_are_refused_at_plan_time(clone, tmp_path):
    """smoke runs the knob's strategy on its home workload (the transformer, the one with a
    toy model) and the baseline on every workload: the two without a toy model are refused
    at plan time, with the reason, no worker started."""
    root, _ = clone
    store = tmp_path / "store"
    args = ["-p", "smoke", "-f", "toy", "-s", STRATEGY, "-s", "baseline", "-b", "1"]
    for workload in ("transformer", "resnet50", "unet3d", WORKLOAD):
        args += ["-w", workload]
    run(root, "-m", "membench", "run", *args, "--store", str(store))
    code = (
        "import json, sys; from membench.records import RecordStore\n"
        "print(json.dumps({f'{r.cell.workload} {r.cell.strategy}': [r.status, r.reason,"
        f" r.environment.get('refused_at'), r.metrics.get('{METRIC}')]"
        " for r in RecordStore(sys.argv[1]).records()}))"
    )
    records = json.loads(run(root, "-c", code, str(store)).strip().splitlines()[-1])
    assert records.keys() == {
        f"transformer {STRATEGY}",
        "transformer baseline",
        "resnet50 baseline",
        "unet3d baseline",
        f"{WORKLOAD} baseline",
    }
    assert records[f"{WORKLOAD} baseline"][0] == "ok"  # the new workload, through the worker
    assert records[f"transformer {STRATEGY}"][0] == records["transformer baseline"][0] == "ok"
    # the new metric, read by the toy's Readings: the toy model's two weight arrays
    assert records[f"transformer {STRATEGY}"][3] == records["transformer baseline"][3] == 2.0
    for workload in ("resnet50", "unet3d"):
        reason = f"workload {workload} has no Toy (numpy) model"
        assert records[f"{workload} baseline"] == ["unsupported", reason, "plan", None]


def test_the_matrix_shows_the_framework_and_the_knob(clone):
    root, _ = clone
    out = run(root, "-m", "membench", "list", "--matrix")
    assert "toy" in out and STRATEGY in out
    table = (root / "docs" / "methodology.md").read_text()  # the generated table, in full
    assert "the forward over each half of the batch" in table
    for other in ("torch", "jax", "jittor"):  # the three others refuse it with no edit
        assert f"the {other} backend does not implement {KNOB}=True" in table


def test_the_inference_knob_is_refused_for_training(clone):
    """Listed in Strategy.inference_knobs (the knob's step 1): a training strategy setting it
    is refused where it is declared."""
    root, _ = clone
    code = f"from membench.registry import Strategy; Strategy('x', '', {KNOB}=True)"
    out = subprocess.run(
        [str(root / ".venv" / "bin" / "python"), "-c", code],
        cwd=root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert f"strategy x: ['{KNOB}'] apply to inference" in out.stderr


def test_the_contract_tests_the_doc_names_pass_in_the_clone(clone):
    """tests/test_contracts.py whole, tests/test_model_contract.py for the toy (the other
    frameworks' modules are this repository's own, checked here), the knob's and the
    workload's tests, the memory
    model's knobs, the committed runs' coverage (ADDED_AFTER_THE_RUNS) and asv's regression
    search against the new metric's direction."""
    root, _ = clone
    run(
        root, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q",
        "tests/test_contracts.py", f"tests/test_{KNOB}.py", f"tests/test_{WORKLOAD}.py",
        "tests/test_memory_model.py::test_every_knob_is_known_to_the_model_and_a_new_one_is_refused",
        "tests/test_asv_catalogue.py::"
        "test_asv_metrics_are_lower_is_better_or_kept_out_of_its_regression_search",
        "tests/test_model_contract.py::test_every_framework_with_models_has_a_contract",
        "tests/test_model_contract.py::test_the_model_module_meets_the_contract[toy-transformer]",
        "tests/test_committed_workloads.py",
        timeout=600,
    )  # fmt: skip
