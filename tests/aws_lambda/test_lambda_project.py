"""``fxdurable init lambda`` and ``fxdurable stage lambda`` without the SAM CLI: the committed
example project is what the scaffold writes, the stage ships the code and leaves a
developer's local state out, and the project's Makefile says what is missing. The real
``sam build`` of the same project is in test_lambda_sam_build.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fxdurable.aws_lambda.project import (
    SCAFFOLD_FILES,
    STAGED_HEADER,
    init_lambda_project,
    stage_lambda,
)
from fxdurable.cli.main import main
from fxdurable.errors import ConfigurationError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lambda_project"


def _tree(root: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


def _example_tree() -> dict[str, bytes]:
    """The example's files as git sees them: committed or new, less what its .gitignore and
    the repository's leave out (a build's output, caches, local stores)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "."],
        cwd=EXAMPLE, capture_output=True, check=True, timeout=30,
    ).stdout.decode().split("\0")  # fmt: skip
    return {name: (EXAMPLE / name).read_bytes() for name in listed if name}


def test_the_committed_example_is_what_the_scaffold_writes(tmp_path: Path) -> None:
    written = init_lambda_project(tmp_path / "fresh")
    fresh = _tree(tmp_path / "fresh")
    assert sorted(fresh) == sorted(target for target, _ in SCAFFOLD_FILES)
    assert {str(p.relative_to(tmp_path / "fresh")) for p in written} == set(fresh)
    example = _example_tree()
    changed = sorted(name for name in fresh if example.get(name) != fresh[name])
    extra = sorted(set(example) - set(fresh))
    assert not changed and not extra, (
        f"examples/lambda_project differs from `fxdurable init lambda` (changed {changed}, "
        f"extra {extra}): rm -r examples/lambda_project && fxdurable init lambda "
        "examples/lambda_project"
    )


def test_the_repositorys_infra_template_is_the_scaffolds() -> None:
    assert (REPO / "infra" / "template.yaml").read_bytes() == (
        EXAMPLE / "template.yaml"
    ).read_bytes(), "infra/template.yaml is a copy of fxdurable/aws_lambda/project_files/"


def test_init_never_overwrites_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "template.yaml").write_text("mine\n")
    assert main(["init", "lambda", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already has template.yaml" in err and "never overwrites" in err
    assert (tmp_path / "template.yaml").read_text() == "mine\n"
    assert not (tmp_path / "myapp").exists()  # nothing written at all


def _project_with_local_state(root: Path) -> Path:
    init_lambda_project(root)
    for stray in (
        ".fxd/fxd.db",
        ".fxd-demo/deployments.log",
        "myapp/.fxd/fxd.db",
        "myapp/.env",
        "myapp/local.db",
        "myapp/local.db-wal",
        "myapp/cache.sqlite3",
        "myapp/tests/test_tools.py",
        "myapp/__pycache__/agents.cpython-311.pyc",
        "myapp/run.log",
    ):
        path = root / stray
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("local state\n")
    (root / "myapp" / "prompts").mkdir()
    (root / "myapp" / "prompts" / "ops.txt").write_text("You check regions.\n")
    (root / "requirements.txt").write_text("# mine\nhttpx>=0.27\nrich>=13\n")
    return root


def test_the_stage_ships_fxdurable_the_package_and_requirements_and_nothing_else(
    tmp_path: Path,
) -> None:
    project = _project_with_local_state(tmp_path / "p")
    staged = stage_lambda(
        project, ["myapp"], Path("build/lambda"), requirements=Path("requirements.txt")
    )
    out = project / "build" / "lambda"
    assert staged.out == out
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert [f for f in files if not f.startswith("fxdurable/")] == [
        "fxdurable-0.1.0.dist-info/METADATA",
        "myapp/__init__.py",
        "myapp/agents.py",
        "myapp/prompts/ops.txt",  # data files of the package ship
        "requirements.txt",
    ]
    assert staged.files == len(files)
    assert "fxdurable/aws_lambda/wake.py" in files and "fxdurable/py.typed" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert sorted(staged.skipped) == [
        "myapp/.env",
        "myapp/.fxd",
        "myapp/cache.sqlite3",
        "myapp/local.db",
        "myapp/local.db-wal",
        "myapp/run.log",
        "myapp/tests",
    ]
    requirements = (out / "requirements.txt").read_text().splitlines()
    assert requirements[0] == STAGED_HEADER
    # fxdurable's own, as its metadata declares them with the lambda extra, less boto3 (the
    # runtime's); then the user's, without comments (pip takes a requirement given twice).
    assert requirements[1:] == [
        "httpx>=0.27",
        "pydantic>=2.6",
        "mangum>=0.17",
        "starlette>=0.37",
        "httpx>=0.27",
        "rich>=13",
    ]
    # A second stage replaces the first: nothing of an earlier one lingers.
    (out / "myapp" / "old.py").write_text("")
    again = stage_lambda(project, ["myapp"], Path("build/lambda"), bundle_boto3=True)
    assert not (out / "myapp" / "old.py").exists()
    assert "boto3>=1.34" in again.requirements


def test_the_stage_refuses_what_it_cannot_do_safely(tmp_path: Path) -> None:
    project = _project_with_local_state(tmp_path / "p")
    mine = project / "dist"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(ConfigurationError, match="not a previous stage's"):
        stage_lambda(project, ["myapp"], Path("dist"))
    assert (mine / "notes.txt").exists()
    with pytest.raises(ConfigurationError, match="would hold the project itself"):
        stage_lambda(project, ["myapp"], Path("."))
    with pytest.raises(ConfigurationError, match="no package 'nope'"):
        stage_lambda(project, ["nope"], Path("build/lambda"))
    with pytest.raises(ConfigurationError, match="name your agents' package"):
        stage_lambda(project, [], Path("build/lambda"))


def test_the_stage_command_answers_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init_lambda_project(tmp_path)
    argv = ["stage", "lambda", "--project", str(tmp_path), "--package", "my-app"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "fxdurable: --package 'my-app' is not a Python package name (e.g. myapp)"


def _make_check(project: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """``make check`` with an empty PATH: make runs its recipes with /bin/sh, and
    ``command -v`` is the shell's own, so only what the variables name can be found."""
    empty = project / "empty-bin"
    empty.mkdir(exist_ok=True)
    make = shutil.which("make")
    assert make is not None
    return subprocess.run(
        [make, "check", *(f"{k}={v}" for k, v in variables.items())],
        cwd=project,
        env={"PATH": str(empty)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_make_check_says_how_to_get_what_the_build_needs(tmp_path: Path) -> None:
    init_lambda_project(tmp_path)
    done = _make_check(tmp_path)
    assert done.returncode != 0 and "pip install aws-sam-cli" in done.stderr, done.stderr
    # With sam (the shell's `true` will do for the check), python3.12 is looked for next.
    done = _make_check(tmp_path, SAM="true")
    assert done.returncode != 0 and "python3.12 not found" in done.stderr, done.stderr
    assert "pyenv install 3.12" in done.stderr
