"""The package is a house of floors (docs/concepts.md, ``[tool.importlinter]`` in
pyproject.toml): a module imports only from its own floor or below, nothing imports the
package face, and no modules import each other in a circle. `lint-imports` checks the
contracts; a broken one names the module, the import and its line."""

from __future__ import annotations

import graphlib
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    for name in ("gpupipe floors: imports point down KEPT",
                 "nothing inside the package imports its face (gpupipe/__init__) KEPT",
                 "no import cycle between the modules of a package KEPT"):
        assert name in r.stdout
    assert "3 kept, 0 broken" in r.stdout


def test_no_module_is_part_of_an_import_cycle():
    """Module by module, lazy imports inside functions included: `graphlib` finds any cycle."""
    graph = grimp.build_graph("gpupipe")
    deps = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    order = list(graphlib.TopologicalSorter(deps).static_order())   # CycleError names it
    assert len(order) == len(graph.modules) > 80
    assert graph.find_modules_that_directly_import("gpupipe") == set()


def test_the_seam_imports_nothing_of_gpupipe():
    graph = grimp.build_graph("gpupipe")
    assert graph.find_modules_directly_imported_by("gpupipe.backends.dispatch") == set()
