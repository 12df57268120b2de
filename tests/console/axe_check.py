"""axe-core (vendored: tests/console/vendor/axe.min.js) run on a page as it is now, for the
browser tests: no serious or critical violation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

__all__ = ["assert_accessible", "serious_violations"]

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
SERIOUS = {"serious", "critical"}


def serious_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is now."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + ": " + n.failureSummary),
            }));
        }"""
    )
    return [v for v in found if v["impact"] in SERIOUS]


def assert_accessible(page: Page, where: str) -> None:
    violations = serious_violations(page)
    assert not violations, f"{where}: {json.dumps(violations, indent=1)}"
