"""``builder validate IMAGE`` (``make validate``): run the in-image smoke suite, write reports."""

from __future__ import annotations

from pathlib import Path

from builder.engine import Engine
from builder.errors import ValidationFailed
from builder.workflow import BUILD_DIR

NAME = "validate"
HELP = "run the smoke suite inside IMAGE; writes report.json and junit.xml"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("image", help="image reference or id")
    parser.add_argument(
        "--report-dir",
        type=Path,
        help="where to write the reports (default: build/reports/validate/...)",
    )


def run(args, log) -> int:
    from builder.validate import run_validation

    engine = Engine.connect()
    image_id = engine.inspect(args.image)["Id"]
    report_dir = (
        args.report_dir or BUILD_DIR / "reports" / "validate" / image_id.split(":")[-1][:16]
    )
    with log.step(f"validate {args.image}"):
        result = run_validation(engine, args.image, report_dir, log=log.info)
    log.result(f"report: {report_dir / 'report.json'}  junit: {report_dir / 'junit.xml'}")
    if not result.passed:
        raise ValidationFailed(f"{args.image}: failed checks: {', '.join(result.failed_checks)}")
    log.result(f"{args.image}: all checks passed")
    return 0
