"""The package's layers hold: no module imports a layer it must not, and no import cycle.

Every import statement counts, also those inside functions (a lazy import is still a
dependency), and so does ``importlib.import_module("llm_ocr....")`` with a literal name; only
imports under ``if TYPE_CHECKING:`` are left out, as they never run. The rules are the ones each
package's ``__init__`` docstring states.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "llm_ocr"

#: Top-level parts of ``llm_ocr`` (a package or a module) that each part must not import.
FORBIDDEN: dict[str, set[str]] = {
    "storage": {"service", "planning", "runners", "stages", "engines", "serving", "commands", "launchers", "report", "bench",
                "sources", "vlm", "cli", "api", "container", "quality"},
    # Talking to a model: the recipes and the client are below the options (the caller passes the
    # client its retry policy; the options quote the families).
    "vlm": {"service", "planning", "engines", "serving", "storage", "stages", "runners", "commands", "launchers", "report",
            "bench", "cli", "sources", "api", "container", "quality", "options", "config", "stage_table", "keywords",
            "gpu_presets"},
    "stages": {"service", "planning", "runners", "commands", "launchers", "serving", "engines", "bench", "report", "cli", "api", "quality"},
    "sources": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "engines", "vlm", "bench",
                "report", "cli", "api", "quality"},
    # The servers llm-ocr ships: only their test harness uses serving's process manager.
    "engines": {"service", "planning", "storage", "stages", "runners", "commands", "launchers", "report", "bench",
                "sources", "cli", "api", "quality", "container"},
    # How a run reaches a model: the engines are servers like any other behind a URL (serving only
    # knows their command lines), and nothing that runs a stage.
    "serving": {"service", "planning", "engines", "runners", "stages", "commands", "launchers", "bench", "report", "cli", "api", "sources",
                "quality"},
    # Container-side contracts (shard index, secrets): the launchers configure jobs for them.
    "container": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "engines", "bench", "report", "cli",
                  "api", "sources", "vlm", "storage", "quality"},
    # The launchers build and submit job specs that run the CLI in a container; they never run a stage.
    "launchers": {"service", "runners", "engines", "serving", "stages", "commands", "cli", "bench", "report", "api", "quality"},
    "report": {"service", "planning", "runners", "engines", "serving", "commands", "launchers", "bench", "cli", "api", "quality"},
    # Runners may ask quality's no-truth signals which pages to escalate (runners/escalation.py),
    # and nothing else of quality (LIMITED below).
    "runners": {"service", "commands", "launchers", "cli", "bench", "report", "api", "engines"},
    "bench": {"service", "commands", "cli", "launchers", "api", "quality"},
    # Quality checks read outputs (storage, sources, report helpers); they never run a stage.
    "quality": {"service", "planning", "runners", "engines", "serving", "stages", "launchers", "bench", "commands", "cli", "api", "vlm",
                "container"},
    # Every option declared once, and its binding to flags, variables and keywords: importable by
    # every layer above vlm, so they import none of them (but vlm's families, default model and
    # prompt, which --recipe is checked against and the help quotes, and the GPU presets' table).
    "options": {"service", "planning", "runners", "stages", "commands", "launchers", "report", "bench", "cli", "api", "sources",
                "storage", "container", "config", "quality", "engines", "stage_table", "serving"},
    # How a run ends (RunError, exit codes, typed views of the completion markers): every layer
    # uses it, so it imports nothing of the package.
    "outcomes": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api", "sources",
                 "storage", "container", "config", "quality", "engines", "vlm", "keywords", "options", "stage_table",
                 "records", "costs", "sharding", "backoff", "testing", "argtypes", "gpu_presets", "pdf_space"},
    # Qwen2-VL's smart_resize, pure arithmetic: the families and the renderer both size images with it.
    "resizing": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api",
                 "sources", "storage", "container", "config", "quality", "engines", "vlm", "keywords", "options",
                 "stage_table", "records", "costs", "sharding", "backoff", "testing", "argtypes", "outcomes",
                 "gpu_presets", "pdf_space"},
    # The knobs of a page read in pieces (llm_ocr/dense_knobs.py): vlm (a cut stream's tokens),
    # sources (a page's ink) and stages read them, and options re-exports them, so it imports
    # nothing of the package.
    "dense_knobs": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench",
                    "cli", "api", "sources", "storage", "container", "config", "quality", "engines", "vlm",
                    "keywords", "options", "stage_table", "records", "costs", "sharding", "backoff", "testing",
                    "argtypes", "outcomes", "resizing", "redaction", "gpu_presets", "pdf_space"},
    # The GPU presets (vLLM settings per GPU, platform hardware names): data that the options'
    # help quotes and serving sizes servers with, so it imports nothing of the package.
    "gpu_presets": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api",
                    "sources", "storage", "container", "config", "quality", "engines", "vlm", "keywords", "options",
                    "stage_table", "records", "costs", "sharding", "backoff", "testing", "argtypes", "outcomes",
                    "resizing", "redaction", "pdf_space"},
    # PDF user space to the displayed page (llm_ocr/pdf_space.py): the text-layer reader (sources)
    # and the simulator's corpus (engines) both map with it, so it imports nothing of the package.
    "pdf_space": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api",
                  "sources", "storage", "container", "config", "quality", "engines", "vlm", "keywords", "options",
                  "stage_table", "records", "costs", "sharding", "backoff", "testing", "argtypes", "outcomes",
                  "resizing", "redaction", "gpu_presets"},
    # What is secret and how it is hidden (llm_ocr/redaction.py): every layer uses it, so it
    # imports nothing of the package.
    "redaction": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api",
                  "sources", "storage", "container", "config", "quality", "engines", "vlm", "keywords", "options",
                  "stage_table", "records", "costs", "sharding", "backoff", "testing", "argtypes", "outcomes",
                  "gpu_presets", "pdf_space"},
    # Every stage declared once: the option models it takes, and its runner named by its import
    # path (imported when the stage runs, so not an import here): every layer above may read it.
    "stage_table": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api",
                    "sources", "storage", "container", "config", "quality", "engines", "vlm", "keywords"},
    "config": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api", "sources",
               "storage", "container", "engines", "vlm", "quality"},
    "keywords": {"service", "planning", "runners", "stages", "commands", "launchers", "serving", "report", "bench", "cli", "api", "sources",
                 "storage", "container", "engines", "vlm", "options", "config", "quality", "stage_table"},
    # Estimates before a launch: they read inputs (sources), prices (costs), families and presets;
    # the launchers, runners and commands use them.
    "planning": {"service", "runners", "stages", "commands", "launchers", "cli", "api", "bench", "engines", "report", "quality",
                 "container", "storage"},
    # The Python API: the CLI stands on it, never the reverse.
    "api": {"service", "commands", "cli"},
    "commands": {"cli"},
    # The service (gateway, queue, workers, client) stands on the Python API, under the commands.
    "service": {"commands", "cli", "launchers", "bench", "engines", "planning"},
}


#: Part -> a layer it may import only some modules of -> those modules.
LIMITED: dict[str, dict[str, set[str]]] = {
    # The runtime's one use of the evaluation package: the Escalate stage's rules read the
    # no-ground-truth page signals that bench-quality also reports.
    "runners": {"quality": {"llm_ocr.quality.signals"}},
    # The review page draws a document as the report does, and puts the pages the no-truth
    # signals flag first; nothing else of the report (its file writer) or of quality.
    "service": {"report": {"llm_ocr.report.fragments", "llm_ocr.report.fields_panel", "llm_ocr.report.safe_html"},
                "quality": {"llm_ocr.quality.signals"}},
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_by_name(call: ast.Call) -> bool:
    """``importlib.import_module("llm_ocr...")``, ``import_module(...)`` or ``__import__(...)``
    with a literal name."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return (
        name in ("import_module", "__import__")
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
        and call.args[0].value.startswith("llm_ocr")
    )


def imports_of(path: Path, package: Path = PACKAGE) -> set[str]:
    """The ``llm_ocr`` modules a file imports (relative imports resolved)."""
    name = module_name(path, package)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _under_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("llm_ocr"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("llm_ocr"):
                found.add(target)
                # ``from llm_ocr.x import y`` may import the module ``llm_ocr.x.y``
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and _imports_by_name(node):
            found.add(node.args[0].value)  # type: ignore[attr-defined]
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (names that are not modules are dropped)."""
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for target in imports_of(path, package):
            # A package import names its __init__; an attribute import names nothing new.
            if target in files and target != name:
                targets.add(target)
        edges[name] = targets
    return edges


def part_of(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def layer_violations(package: Path = PACKAGE) -> list[str]:
    """Every import of a module from a layer its own layer must not import, or of a module of
    a layer it may import only some modules of (:data:`LIMITED`) that is not one of them."""

    def forbidden(module: str, target: str) -> bool:
        part, layer = part_of(module), part_of(target)
        if layer in FORBIDDEN.get(part, set()):
            return True
        allowed = LIMITED.get(part, {}).get(layer)
        return allowed is not None and target not in allowed

    return sorted(
        f"{module} imports {target}"
        for module, targets in graph(package).items()
        for target in targets
        if forbidden(module, target)
    )


def test_no_module_imports_a_layer_it_must_not() -> None:
    violations = layer_violations()
    assert not violations, "\n".join(violations)


#: The launchers' core room; every other room under ``llm_ocr/launchers/`` is one platform's.
LAUNCHERS, LAUNCHER_CORE = "llm_ocr.launchers", "core"


def launcher_room(module: str) -> str | None:
    """The room of a module under ``llm_ocr.launchers`` ("" for the package itself, the registry of
    adapters by name); None outside the launchers."""
    if module == LAUNCHERS:
        return ""
    if not module.startswith(LAUNCHERS + "."):
        return None
    return module.split(".")[2]


def launcher_room_violations(package: Path = PACKAGE) -> list[str]:
    """Every import between the launchers' rooms that crosses the way it must not: a platform room
    imports the core room only (never another platform's room, nor the registry), the core imports
    no platform room (it reaches an adapter by name, through the registry), and the registry
    imports no room (it names the adapters as strings)."""
    found = []
    for module, targets in graph(package).items():
        room = launcher_room(module)
        if room is None:
            continue
        if room == "":
            allowed = {""}  # the registry names the adapters as strings
        elif room == LAUNCHER_CORE:
            allowed = {LAUNCHER_CORE, ""}  # the core reaches a platform by name, through the registry
        else:
            allowed = {room, LAUNCHER_CORE}
        found += [f"{module} imports {target}" for target in targets
                  if launcher_room(target) is not None and launcher_room(target) not in allowed]
    return sorted(found)


def test_platform_rooms_import_the_core_and_the_core_no_platform() -> None:
    violations = launcher_room_violations()
    assert not violations, "\n".join(violations)


def test_every_platform_is_a_room_and_every_room_but_the_core_a_platform() -> None:
    """No launcher module lies outside a room, and the registry names each platform's adapter in
    that platform's own room."""
    from llm_ocr.launchers import PLATFORMS

    launchers = PACKAGE / "launchers"
    assert sorted(p.name for p in launchers.glob("*.py")) == ["__init__.py"]
    rooms = {p.name for p in launchers.iterdir() if (p / "__init__.py").is_file()}
    registered = {target.partition(":")[0] for target in PLATFORMS.values()}
    assert {launcher_room(module) for module in registered} == rooms - {LAUNCHER_CORE}
    assert len(registered) == len(PLATFORMS)  # one room per platform


@pytest.mark.parametrize(
    ("module", "source", "violation"),
    [
        ("hf_jobs/adapter.py", "from llm_ocr.launchers.sagemaker.adapter import SageMaker\n",
         "llm_ocr.launchers.hf_jobs.adapter imports llm_ocr.launchers.sagemaker.adapter"),
        ("hf_jobs/adapter.py", "from llm_ocr.launchers import platform_class\n",
         "llm_ocr.launchers.hf_jobs.adapter imports llm_ocr.launchers"),
        ("core/follow.py", "def f():\n    from ..hf_jobs import adapter\n",
         "llm_ocr.launchers.core.follow imports llm_ocr.launchers.hf_jobs.adapter"),
        ("__init__.py", "import importlib\ndef f():\n    return importlib.import_module('llm_ocr.launchers.core.api')\n",
         "llm_ocr.launchers imports llm_ocr.launchers.core.api"),
    ],
)
def test_the_room_check_sees_a_room_import_it_must_not(tmp_path: Path, module: str, source: str, violation: str) -> None:
    """The room check can fail: a forbidden import planted in a copy of the launchers' shape is
    reported; the imports the rooms are allowed are not."""
    package = tmp_path / "llm_ocr"
    files = {
        "__init__.py": "",
        "launchers/__init__.py": "PLATFORMS = {'hf-jobs': 'llm_ocr.launchers.hf_jobs.adapter:HfJobs'}\n",
        "launchers/core/__init__.py": "",
        "launchers/core/api.py": "from llm_ocr.launchers import PLATFORMS\nfrom llm_ocr.launchers.core import follow\n",
        "launchers/core/follow.py": "",
        "launchers/hf_jobs/__init__.py": "",
        "launchers/hf_jobs/adapter.py": "from llm_ocr.launchers.core.api import PLATFORMS\nfrom . import state\n",
        "launchers/hf_jobs/state.py": "",
        "launchers/sagemaker/__init__.py": "",
        "launchers/sagemaker/adapter.py": "from ..core import follow\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    assert launcher_room_violations(package) == []
    (package / "launchers" / module).write_text(files[f"launchers/{module}"] + source, encoding="utf-8")
    assert violation in launcher_room_violations(package)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_cycles() -> None:
    edges = graph()
    # A package's __init__ re-exporting its modules, which import the package for its door,
    # is one unit, not a cycle between layers: fold each __init__ into its modules' edges.
    folded = {m: {t for t in ts if not (m.startswith(t + ".") or t.startswith(m + "."))} for m, ts in edges.items()}
    cycles = _cycles(folded)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "source",
    [
        "from llm_ocr.serving.vllm.process import ManagedServer\n",
        "def f():\n    from llm_ocr.serving.vllm import process\n",
        "from ..serving.vllm.process import ManagedServer\n",
        "import importlib\ndef f():\n    return importlib.import_module(\"llm_ocr.serving.vllm.process\")\n",
    ],
)
def test_the_checker_sees_direct_lazy_and_relative_imports(tmp_path: Path, source: str) -> None:
    """The scan itself can fail: a forbidden import planted in a storage module of a copy of
    the package's shape is reported, whichever form it takes (an import by name included)."""
    package = tmp_path / "llm_ocr"
    for module, text in {
        "__init__.py": "",
        "storage/__init__.py": "",
        "storage/url.py": source,
        "serving/__init__.py": "",
        "serving/vllm/__init__.py": "",
        "serving/vllm/process.py": "class ManagedServer: ...\n",
    }.items():
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text(text, encoding="utf-8")
    assert "llm_ocr.storage.url imports llm_ocr.serving.vllm.process" in layer_violations(package)
    (package / "storage/url.py").write_text("if TYPE_CHECKING:\n" + "".join("    " + line + "\n" for line in source.splitlines()), encoding="utf-8")
    assert layer_violations(package) == []  # type-checking imports never run


def test_a_layer_limited_to_some_modules_of_another_may_import_only_those(tmp_path: Path) -> None:
    """Runners may read quality's page signals, not the rest of quality (its benchmark scoring)."""
    package = tmp_path / "llm_ocr"
    for module, text in {
        "__init__.py": "",
        "runners/__init__.py": "",
        "runners/escalation.py": "from llm_ocr.quality.signals import page_signals\n",
        "runners/other.py": "def f():\n    from llm_ocr.quality import score\n",
        "quality/__init__.py": "",
        "quality/signals.py": "def page_signals(): ...\n",
        "quality/score.py": "",
    }.items():
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text(text, encoding="utf-8")
    assert layer_violations(package) == [  # the package's door, then the module
        "llm_ocr.runners.other imports llm_ocr.quality", "llm_ocr.runners.other imports llm_ocr.quality.score"]


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_render_worker_imports_neither_the_listing_nor_pyarrow() -> None:
    """A render worker (``llm_ocr.runners.process_pool``) unpickles its calls: the render functions
    and ``WithKnobs``. They need ``llm_ocr.sources.render``, not the package's listing (pyarrow,
    the dataset readers): 0.3 CPU-s for a worker's imports against 0.7-0.8 with them."""
    import subprocess
    import sys

    code = ("import sys; import llm_ocr.runners.workers, llm_ocr.sources.render; "
            "print(sorted(m for m in ('pyarrow', 'pandas', 'llm_ocr.sources.listing') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(PACKAGE.parent))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]


def test_the_command_line_lists_its_options_without_importing_a_model_client_or_a_stage() -> None:
    """``llm-ocr --help``, ``status`` or ``jobs status`` build the whole parser: that must not pay
    for the model client, the runners or the benchmark (about a second of CPU each time). A run
    imports its runner, but never the ``openai`` SDK (~0.6 CPU-s of pydantic models at import):
    the client is llm-ocr's own (:mod:`llm_ocr.vlm.http`). A shard's command line (``extract``)
    is parsed without even the other commands' modules: the report, the launchers, the
    benchmarks (a quarter of a CPU-second, paid by every shard as it starts). The simulated
    server, started hundreds of times a test run, imports no pyarrow (a third of its import's CPU;
    it writes no rows) and no pydantic (``from llm_ocr import pdf_space`` once went through the
    package's ``__getattr__`` to the stage table). It is imported first: it imports none of the
    modules looked for after it, so it hides none of the command line's."""
    import subprocess
    import sys

    code = ("import sys; import llm_ocr.engines.sim.server; print(sorted(m for m in ('pyarrow', 'pandas', 'pydantic') if m in sys.modules)); "
            "from llm_ocr.cli import build_parser, parse_args; "
            "parse_args(['extract', 'in', '--output', 'o']); "
            "print(sorted(m for m in ('llm_ocr.report', 'llm_ocr.launchers', 'llm_ocr.bench', 'pandas') if m in sys.modules)); "
            "build_parser(); "
            "print(sorted(m for m in ('openai', 'llm_ocr.runners', 'llm_ocr.bench.run', 'llm_ocr.serving.open') if m in sys.modules)); "
            "import llm_ocr.runners.extract; print(sorted(m for m in ('openai', 'httpx', 'httpx2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(PACKAGE.parent))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]", "[]", "[]"]
