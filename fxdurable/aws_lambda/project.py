"""A user's Lambda project: ``fxdurable init lambda DIR`` writes one, ``fxdurable stage lambda``
assembles the code its functions ship.

Why a stage of our own: ``sam build`` copies *every* file under a function's ``CodeUri``
(aws-lambda-builders' Python workflow has a fixed exclude list and no ``.samignore``), so a
``CodeUri`` that is the project directory ships whatever lies there: local stores
(``.fxd/fxd.db`` with HTTP conversations), workspaces (``.fxd-demo/``), tests, venvs. The
template's ``CodeUri`` is ``build/lambda/`` instead, which :func:`stage_lambda` fills with
exactly three things:

- fxdurable itself, copied from the installed distribution (the files of the wheel the user
  installed, with its ``METADATA``), so the functions run the version the project was tested
  with, however it was installed (wheel, git URL, local path);
- the user's agents packages, without hidden entries (``.fxd*``, ``.venv``, ``.git``, ``.env``),
  ``tests/``, ``__pycache__``, databases and logs;
- ``requirements.txt``: fxdurable's own dependencies with the ``lambda`` extra, and the user's.
  ``sam build`` installs them for the functions' platform (pydantic-core is compiled code).
  boto3 and botocore are left to the Lambda runtime, which ships them: bundling them would add
  about 36 MB to each function (``bundle_boto3=True`` does it anyway, to pin the SDK).

The handlers are the library's own (``fxdurable.aws_lambda.http.handler`` and so on): a user's
project holds no copy of them.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import re
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from fxdurable.errors import ConfigurationError

__all__ = [
    "SCAFFOLD_FILES",
    "StagedLambda",
    "init_lambda_project",
    "lambda_requirements",
    "scaffold_file",
    "stage_lambda",
]

# (where the file goes in the user's project, its name among this package's data). Python
# files are stored as .tmpl: they are the user's code, not modules of fxdurable.
SCAFFOLD_FILES: tuple[tuple[str, str], ...] = (
    ("README.md", "README.md"),
    ("Makefile", "Makefile"),
    ("template.yaml", "template.yaml"),
    ("requirements.txt", "requirements.txt"),
    (".gitignore", "gitignore.tmpl"),
    ("myapp/__init__.py", "myapp/__init__.py.tmpl"),
    ("myapp/agents.py", "myapp/agents.py.tmpl"),
)

# The first line of a staged requirements.txt: how a later stage knows the directory is its
# own to replace.
STAGED_HEADER = "# Written by `fxdurable stage lambda`: rebuilt at each build, do not edit."

# In the Lambda runtime already (python3.12 ships boto3, botocore and their dependencies).
RUNTIME_PROVIDED = frozenset({"boto3", "botocore"})

# Never shipped from a package directory: local state, secrets and what tests or builds leave.
_SKIPPED_DIRECTORIES = ("tests", "__pycache__", "build", "dist", "node_modules")
_SKIPPED_FILES = (
    "*.pyc",
    "*.pyo",
    "*.db",
    "*.db-*",
    "*.sqlite",
    "*.sqlite3",
    "*.sqlite-*",
    "*.log",
)
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class StagedLambda:
    """What :func:`stage_lambda` put in ``out`` and what it left out (paths relative to the
    project, for the user to see)."""

    out: Path
    files: int
    requirements: list[str]
    skipped: list[str] = field(default_factory=list)


def init_lambda_project(directory: Path) -> list[Path]:
    """Write the project files into ``directory`` (created if missing). Refuses to overwrite:
    an existing file is the user's."""
    existing = [target for target, _ in SCAFFOLD_FILES if (directory / target).exists()]
    if existing:
        raise ConfigurationError(
            f"{directory} already has {', '.join(existing)}: choose an empty directory "
            "(fxdurable init lambda never overwrites a file)"
        )
    contents = {target: scaffold_file(stored) for target, stored in SCAFFOLD_FILES}
    written = []
    for target, content in contents.items():
        path = directory / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written.append(path)
    return written


def scaffold_file(stored: str) -> bytes:
    """One of the project files as this package ships it (``SCAFFOLD_FILES``' second names)."""
    item = resources.files("fxdurable.aws_lambda") / "project_files"
    for part in stored.split("/"):
        item = item / part
    return item.read_bytes()


def lambda_requirements(*, bundle_boto3: bool = False) -> list[str]:
    """fxdurable's own requirements with the ``lambda`` extra, as the installed distribution
    declares them, less what the Lambda runtime provides (unless ``bundle_boto3``)."""
    declared = importlib.metadata.requires("fxdurable") or []
    wanted: list[str] = []
    for line in declared:
        spec, _, marker = line.partition(";")
        marker = marker.strip().replace('"', "'")
        if marker and marker != "extra == 'lambda'":
            continue
        match = _REQUIREMENT_NAME.match(spec)
        if match is None:
            continue
        if not bundle_boto3 and match[1].lower() in RUNTIME_PROVIDED:
            continue
        spec = spec.strip()
        if spec not in wanted:
            wanted.append(spec)
    return wanted


def stage_lambda(
    project: Path,
    packages: list[str],
    out: Path,
    *,
    requirements: Path | None = None,
    bundle_boto3: bool = False,
) -> StagedLambda:
    """Replace ``out`` with the functions' code: fxdurable, ``packages`` (directories or
    ``NAME.py`` in ``project``) and a ``requirements.txt`` (see the module's docstring)."""
    project = project.resolve()
    out = (project / out).resolve()
    if not packages:
        raise ConfigurationError(
            "name your agents' package: fxdurable stage lambda --package myapp"
        )
    if out == project or out in project.parents:
        raise ConfigurationError(f"--out {out} would hold the project itself: use build/lambda")
    sources = [_package_source(project, name) for name in packages]
    user_requirements = _read_requirements(project, requirements)
    _clear(out)
    skipped: list[str] = []
    count = 0
    fxdurable_dir = _installed_fxdurable()
    count += _copy_tree(fxdurable_dir, out / "fxdurable", fxdurable_dir.parent, skipped)
    distribution = importlib.metadata.distribution("fxdurable")
    info = out / f"fxdurable-{distribution.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(distribution.read_text("METADATA") or "")
    count += 1
    for source in sources:
        if source.is_dir():
            count += _copy_tree(source, out / source.name, project, skipped)
        else:
            shutil.copyfile(source, out / source.name)
            count += 1
    wanted = lambda_requirements(bundle_boto3=bundle_boto3) + user_requirements
    (out / "requirements.txt").write_text("\n".join([STAGED_HEADER, *wanted]) + "\n")
    return StagedLambda(out=out, files=count + 1, requirements=wanted, skipped=skipped)


def _package_source(project: Path, name: str) -> Path:
    if not name.isidentifier():
        raise ConfigurationError(f"--package {name!r} is not a Python package name (e.g. myapp)")
    for candidate in (project / name, project / f"{name}.py"):
        if candidate.exists():
            return candidate
    raise ConfigurationError(
        f"no package {name!r} in {project}: --package names a directory or {name}.py there"
    )


def _read_requirements(project: Path, path: Path | None) -> list[str]:
    if path is None:
        return []
    path = project / path
    if not path.is_file():
        raise ConfigurationError(f"no requirements file {path}")
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _clear(out: Path) -> None:
    """Empty ``out`` for a new stage, if it is a stage's or empty: never a user's directory."""
    if out.exists():
        staged = out / "requirements.txt"
        ours = staged.is_file() and staged.read_text().startswith(STAGED_HEADER)
        if any(out.iterdir()) and not ours:
            raise ConfigurationError(
                f"{out} is not empty and not a previous stage's: choose another --out"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)


def _installed_fxdurable() -> Path:
    """The directory of the fxdurable package this module belongs to (the one installed)."""
    return Path(__file__).resolve().parent.parent


def _skipped(path: Path) -> bool:
    name = path.name
    if name.startswith("."):
        return True  # .fxd*, .venv, .git, .env, .pytest_cache ...
    if path.is_dir():
        return name in _SKIPPED_DIRECTORIES or name.endswith(".egg-info")
    return any(fnmatch.fnmatch(name, pattern) for pattern in _SKIPPED_FILES)


def _copy_tree(source: Path, target: Path, relative_to: Path, skipped: list[str]) -> int:
    count = 0
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if _skipped(entry):
            if entry.name != "__pycache__" and not entry.name.endswith((".pyc", ".pyo")):
                skipped.append(str(entry.relative_to(relative_to)))
            continue
        if entry.is_symlink():
            skipped.append(f"{entry.relative_to(relative_to)} (a symlink)")
        elif entry.is_dir():
            count += _copy_tree(entry, target / entry.name, relative_to, skipped)
        elif entry.is_file():
            shutil.copyfile(entry, target / entry.name)
            count += 1
    return count
