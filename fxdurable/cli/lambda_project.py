"""``fxdurable init lambda DIR`` and ``fxdurable stage lambda``: a Lambda project of the
user's own and the code its functions ship (:mod:`fxdurable.aws_lambda.project`)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parsers", "run"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    init = sub.add_parser("init", help="write a new project from a template")
    init_kind = init.add_subparsers(dest="kind", required=True)
    init_lambda = init_kind.add_parser(
        "lambda",
        help="a project that deploys your agents to AWS Lambda with SAM (template.yaml, "
        "Makefile, an agents package to replace)",
    )
    init_lambda.add_argument("directory", help="where to write it (created if missing)")

    stage = sub.add_parser("stage", help="assemble what a deployment ships")
    stage_kind = stage.add_subparsers(dest="kind", required=True)
    stage_lambda = stage_kind.add_parser(
        "lambda",
        help="fill the template's CodeUri (build/lambda/) with the installed fxdurable, your "
        "agents' packages and requirements.txt, and nothing else (make build runs it)",
    )
    stage_lambda.add_argument(
        "--package",
        action="append",
        default=[],
        metavar="NAME",
        help="an agents package (directory or NAME.py in --project); repeat for several",
    )
    stage_lambda.add_argument("--project", default=".", help="the project directory (default: .)")
    stage_lambda.add_argument(
        "--out", default="build/lambda", help="the directory to fill (default: build/lambda)"
    )
    stage_lambda.add_argument(
        "--requirements", metavar="FILE", help="your agents' own requirements (pip's format)"
    )
    stage_lambda.add_argument(
        "--bundle-boto3",
        action="store_true",
        help="ship boto3 and botocore too (about 36 MB) instead of the Lambda runtime's",
    )


def run(args: argparse.Namespace) -> int:
    from fxdurable.aws_lambda.project import init_lambda_project, stage_lambda

    if args.command == "init":
        directory = Path(args.directory)
        init_lambda_project(directory)
        print(f"wrote a Lambda project in {directory}: see {directory / 'README.md'}")
        print(f"next: cd {directory} && make build")
        return 0
    staged = stage_lambda(
        Path(args.project),
        args.package,
        Path(args.out),
        requirements=Path(args.requirements) if args.requirements else None,
        bundle_boto3=args.bundle_boto3,
    )
    print(f"staged {staged.files} file(s) in {staged.out}")
    print(f"requirements: {', '.join(staged.requirements)}")
    if staged.skipped:
        print(f"left out: {', '.join(staged.skipped)}")
    return 0
