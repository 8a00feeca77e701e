"""A CloudWatch dashboard body drawn as an SVG picture of its widget grid (docs/alerts.md shows one):
each widget a box at its place in the 24-column grid, with its title and what it plots.

.venv/bin/python -m infra.dashboard_svg --stack dev --job resnet50-elastic > docs/alerts-dashboard.svg
"""

from __future__ import annotations

import argparse
import sys
from html import escape
from typing import Any

COLUMN = 40  # pixels per grid column
ROW = 30  # pixels per grid row
PAD = 4


def _title(w: dict[str, Any]) -> str:
    p = w.get("properties", {})
    if w.get("type") == "text":
        return str(p.get("markdown", "")).splitlines()[0].lstrip("# ")
    return str(p.get("title", w.get("type", "")))


def _what(w: dict[str, Any]) -> list[str]:
    """Up to four lines naming what the widget plots."""
    p = w.get("properties", {})
    if w.get("type") == "text":
        return [line for line in str(p.get("markdown", "")).splitlines()[1:]][:4]
    lines = []
    for m in p.get("metrics", []):
        opts = m[-1] if isinstance(m[-1], dict) else {}
        lines.append(str(opts.get("label") or m[1]))
    more = len(lines) - 3
    return lines[:3] + ([f"... {more} more"] if more > 0 else [])


def _wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*out, line] if line else out


def render(body: dict[str, Any], title: str) -> str:
    widgets = body["widgets"]
    width = 24 * COLUMN
    height = max(w["y"] + w["height"] for w in widgets) * ROW + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        f'<rect width="{width}" height="{height}" fill="#f2f3f3"/>',
        f'<text x="{PAD * 2}" y="26" font-size="18" fill="#16191f">{escape(title)}</text>',
    ]
    for w in widgets:
        x, y = w["x"] * COLUMN + PAD, w["y"] * ROW + 40 + PAD
        wd, ht = w["width"] * COLUMN - 2 * PAD, w["height"] * ROW - 2 * PAD
        out.append(f'<rect x="{x}" y="{y}" width="{wd}" height="{ht}" fill="#ffffff" stroke="#aab7b8"/>')
        out.append(f'<text x="{x + 8}" y="{y + 20}" font-size="14" fill="#16191f">{escape(_title(w))}</text>')
        chars = max(10, wd // 7)
        lines = [piece for text in _what(w) for piece in _wrap(text, chars)][:6]
        for i, text in enumerate(lines):
            out.append(f'<text x="{x + 8}" y="{y + 42 + 16 * i}" font-size="12" fill="#545b64">{escape(text)}</text>')
        if w.get("type") == "metric":
            base = y + ht - 12
            points = " ".join(f"{x + 12 + i * (wd - 24) // 11},{base - (17 * (i % 4)) - 8}" for i in range(12))
            out.append(f'<polyline points="{points}" fill="none" stroke="#0073bb" stroke-width="2"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def job_picture(stack: str, job: str) -> str:
    """The SVG of the dashboard of ``job`` in the committed stack ``stack``."""
    from facts.paths import PROJECT_ROOT
    from stacks.alerts import plan
    from stacks.config import load
    from stacks.config.stackfile import read_stack_config
    from stacks.dashboards import job_dashboard_name

    project, values = read_stack_config(stack, PROJECT_ROOT)
    cfg = load(values, project, stack)
    name = job_dashboard_name(cfg.cluster_name, job)
    return render(plan(cfg).dashboards[name], f"CloudWatch dashboard {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--job", default="resnet50-elastic")
    args = parser.parse_args()
    sys.stdout.write(job_picture(args.stack, args.job))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
