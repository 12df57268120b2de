"""``module:attribute`` agents are imported from the application directory (issue 21): first on
``sys.path``, as rq, uvicorn and celery do, so a user's ``mymod.py`` beside them is found by an
installed ``fxdurable`` whose own ``sys.path[0]`` is its venv's ``bin/``.

In-process checks of the rules; tests/e2e/test_user_project.py runs them through the installed
wheel's commands from an empty directory.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent_spec import APP_DIR_ENV, load_agents, resolve_app_dir

AGENT_MODULE = """
import fxdurable as fx

agents = [fx.Agent("{name}", model=fx.ScriptedModel([fx.reply("hi")]))]
"""


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """sys.path and the user modules these tests import are put back afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv(APP_DIR_ENV, raising=False)
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("fxd_spec_"):
            del sys.modules[name]


def _write(directory: Path, module: str, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{module}.py").write_text(AGENT_MODULE.format(name=name))


@pytest.mark.usefixtures("isolated_imports")
def test_the_current_directory_goes_first_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "fxd_spec_cwd", "from-cwd")
    monkeypatch.chdir(tmp_path)
    sys.path[:] = [p for p in sys.path if p not in ("", ".", str(tmp_path))]
    agents = load_agents("fxd_spec_cwd:agents")
    assert [a.name for a in agents] == ["from-cwd"]
    assert sys.path[0] == str(tmp_path.resolve())
    load_agents("fxd_spec_cwd:agents")  # each RQ job loads again: no second entry
    assert sys.path.count(str(tmp_path.resolve())) == 1


@pytest.mark.usefixtures("isolated_imports")
def test_app_dir_then_the_environment_then_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "given", "fxd_spec_given", "given")
    _write(tmp_path / "env", "fxd_spec_env", "env")
    monkeypatch.chdir(tmp_path)
    assert load_agents("fxd_spec_given:agents", app_dir="given")[0].name == "given"
    monkeypatch.setenv(APP_DIR_ENV, str(tmp_path / "env"))
    assert resolve_app_dir() == (tmp_path / "env").resolve()
    assert load_agents("fxd_spec_env:agents")[0].name == "env"
    # The argument wins over the environment.
    assert resolve_app_dir("given") == (tmp_path / "given").resolve()


@pytest.mark.usefixtures("isolated_imports")
def test_a_missing_module_names_the_directory_and_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        load_agents("fxd_spec_nowhere:agents")
    message = str(caught.value)
    assert "no module named 'fxd_spec_nowhere'" in message, message
    assert str(tmp_path.resolve()) in message and "--app-dir DIR" in message, message
    assert APP_DIR_ENV in message and "\n" not in message, message


@pytest.mark.usefixtures("isolated_imports")
def test_a_dependency_of_the_module_missing_is_not_called_the_module_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fxd_spec_needy.py").write_text("import fxd_spec_not_installed\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        load_agents("fxd_spec_needy:agents")
    message = str(caught.value)
    assert "importing 'fxd_spec_needy'" in message, message
    assert "No module named 'fxd_spec_not_installed'" in message, message
    assert "--app-dir" not in message, message


@pytest.mark.usefixtures("isolated_imports")
def test_an_app_dir_that_is_not_a_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match=r"--app-dir '.*nope' is not a directory"):
        load_agents("anything:agents", app_dir=tmp_path / "nope")
    monkeypatch.setenv(APP_DIR_ENV, str(tmp_path / "gone"))
    with pytest.raises(ConfigurationError, match=r"FXD_APP_DIR '.*gone' is not a directory"):
        resolve_app_dir()


@pytest.mark.usefixtures("isolated_imports")
def test_lambda_imports_from_its_task_root_unless_fxd_app_dir_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fxdurable.aws_lambda.config import app_dir

    task_root, elsewhere = tmp_path / "var-task", tmp_path / "elsewhere"
    _write(task_root, "fxd_spec_lambda", "on-lambda")
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not where the code is: the import must not depend on it
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(task_root))
    assert app_dir() == str(task_root)
    assert load_agents("fxd_spec_lambda:agents", app_dir=app_dir())[0].name == "on-lambda"
    monkeypatch.setenv(APP_DIR_ENV, str(elsewhere))
    assert app_dir() is None  # the loader reads FXD_APP_DIR itself
    monkeypatch.delenv("LAMBDA_TASK_ROOT")
    monkeypatch.delenv(APP_DIR_ENV)
    assert app_dir() is None
