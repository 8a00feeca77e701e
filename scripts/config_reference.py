"""Print, check or write the configuration reference's key tables (docs/config.md), generated from
the config models.

.venv/bin/python scripts/config_reference.py           # print them
.venv/bin/python scripts/config_reference.py --write   # replace them in docs/config.md
.venv/bin/python scripts/config_reference.py --check   # exit 1 if docs/config.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stacks.config import reference  # noqa: E402

CONFIG_DOC = ROOT / "docs" / "config.md"


def replaced(text: str) -> str:
    """``text`` with the generated block between the markers replaced by the current one."""
    start, end = text.index(reference.BEGIN), text.index(reference.END) + len(reference.END)
    return text[:start] + reference.markdown() + text[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the block in docs/config.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/config.md's block differs")
    args = parser.parse_args()
    if not (args.write or args.check):
        print(reference.markdown())
        return 0
    text = CONFIG_DOC.read_text()
    new = replaced(text)
    if args.check:
        if new != text:
            print(
                "docs/config.md's key tables are out of date: run scripts/config_reference.py --write",
                file=sys.stderr,
            )
            return 1
        return 0
    CONFIG_DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
