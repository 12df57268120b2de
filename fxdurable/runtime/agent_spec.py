"""Agents named by configuration: ``package.module:attribute`` (``FXD_AGENTS``, ``--agents``).

Every process that runs or serves agents from configuration (an RQ worker and each of its
jobs, an SQS worker, ``fxdurable serve`` and its ``--demo`` worker, the deployable HTTP
handler, the Lambda functions) loads them with the same rules, here.

The user's module is imported the way ``rq``, ``uvicorn`` and ``celery`` import theirs: the
application directory goes first on ``sys.path``. That directory is ``app_dir`` when given
(``--app-dir``, which the CLI passes on as ``FXD_APP_DIR`` so forked work horses and child
processes find the same one), else ``$FXD_APP_DIR``, else the current directory. Without
this, an installed ``fxdurable`` console script sees only its own venv's site-packages (its
``sys.path[0]`` is the venv's ``bin/``), and ``FXD_AGENTS=mymod:agents`` fails in the very
directory that holds ``mymod.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent

__all__ = ["APP_DIR_ENV", "import_app_module", "load_agents", "resolve_app_dir"]

#: The environment variable naming the application directory (``--app-dir`` sets it).
APP_DIR_ENV = "FXD_APP_DIR"


def resolve_app_dir(app_dir: str | os.PathLike[str] | None = None) -> Path:
    """The application directory, absolute: ``app_dir``, else ``$FXD_APP_DIR``, else the
    current directory. A configuration error if it is not a directory."""
    given = app_dir if app_dir is not None else os.environ.get(APP_DIR_ENV) or None
    where = Path(given if given is not None else os.getcwd()).expanduser()
    if not where.is_dir():
        origin = "--app-dir" if app_dir is not None else APP_DIR_ENV
        raise ConfigurationError(f"{origin} {str(given)!r} is not a directory")
    return where.resolve()


def import_app_module(
    module_name: str, *, app_dir: str | os.PathLike[str] | None = None, named_by: str
) -> ModuleType:
    """Import the user's ``module_name`` with the application directory first on
    ``sys.path``. ``named_by`` says where the name came from, for the error message."""
    where = resolve_app_dir(app_dir)
    entry = str(where)
    if not sys.path or sys.path[0] != entry:
        # First, as uvicorn does: the user's module wins over an installed one of that name.
        # A repeated load (each RQ job loads the agents again) finds it there already.
        sys.path.insert(0, entry)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"no module named {missing!r} (from {named_by}) in {where} or the installed "
                "packages: run from your project's directory, or pass --app-dir DIR "
                f"(or set {APP_DIR_ENV}) naming the directory that holds it"
            ) from exc
        # The user's module was found, but something it imports is not installed.
        raise ConfigurationError(
            f"importing {module_name!r} (from {named_by}) failed: {exc}; install what it needs "
            "into this environment"
        ) from exc
    except ImportError as exc:
        raise ConfigurationError(
            f"importing {module_name!r} (from {named_by}) failed: {exc}"
        ) from exc


def load_agents(spec: str, *, app_dir: str | os.PathLike[str] | None = None) -> list[Agent]:
    """The agents ``spec`` (``module:attribute``) names: an Agent, a list of them, or a
    function returning either. ``app_dir``: see :func:`resolve_app_dir`."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"FXD_AGENTS must look like 'package.module:agents', not {spec!r}")
    module = import_app_module(module_name, app_dir=app_dir, named_by=f"FXD_AGENTS={spec}")
    try:
        value = getattr(module, attribute)
    except AttributeError as exc:
        raise ConfigurationError(f"{module_name!r} has no attribute {attribute!r}") from exc
    if callable(value) and not isinstance(value, Agent):
        value = value()
    agents: Sequence[object] = [value] if isinstance(value, Agent) else value
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise ConfigurationError(f"{spec!r} must name an Agent or a list of Agents")
    return [a for a in agents if isinstance(a, Agent)]
