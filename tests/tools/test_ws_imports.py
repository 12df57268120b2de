"""``import fxdurable.tools`` is cheap: it loads none of the runtime, and neither does making
a directory workspace; each public name resolves to what it names (a function, never a
submodule of the same name). Checked on ``sys.modules`` in a fresh interpreter."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import types

import fxdurable.tools as fxt


def loaded_after(code: str) -> list[str]:
    """The fxdurable.runtime modules loaded after running ``code`` in a fresh interpreter."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fxdurable.runtime'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout)
    return loaded


def test_importing_the_tools_and_making_a_directory_workspace_loads_no_runtime(tmp_path):
    assert loaded_after("import fxdurable.tools") == []
    made = f"from fxdurable import tools as fxt\nfxt.directory({str(tmp_path)!r})"
    assert loaded_after(made) == []
    assert loaded_after("from fxdurable import tools\ntools.workspace_tools") != []


def test_every_public_name_is_what_it_names_after_every_submodule_is_imported():
    for module in pkgutil.iter_modules(fxt.__path__):
        __import__(f"fxdurable.tools.{module.name}")
    for name in fxt.__all__:
        value = getattr(fxt, name)
        assert not isinstance(value, types.ModuleType), f"fxdurable.tools.{name} is a module"
    assert set(fxt.__all__) <= set(dir(fxt))


def test_the_errors_are_fxdurables():
    import fxdurable

    assert fxt.WorkspaceError is fxdurable.WorkspaceError
    assert issubclass(fxt.PathRefusedError, fxdurable.WorkspaceError)
    assert issubclass(fxt.EditError, fxdurable.FxDurableError)
