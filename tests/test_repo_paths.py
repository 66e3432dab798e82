"""Nothing in the repository names a path outside it: a user's fresh clone has none of them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Patterns are assembled so this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            r"\.\." + r"/shared",  # the developers' data drop beside the checkout
            r'parent\s*/\s*"' + r'shared"',
            r"/tmp/" + r"venv",  # a developer's venv
            r"(?<![\w.])/" + r"work/",  # the development machine's checkout root
            r"(?<![\w.])/" + r"root/",
        ]
    )
)
CODE = (
    "builder",
    "smoke",
    "tests",
    "bench",
    "scripts",
    "dockerfiles",
    ".ci",
    "Makefile",
    "pyproject.toml",
    "image.yaml",
    "README.md",
    "docs",
    "tuning",
    "patches",
)


def test_no_tracked_file_names_a_path_outside_the_repo():
    files = subprocess.run(
        ["git", "ls-files", "--", *CODE], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert files, "git ls-files found nothing: not a checkout?"
    hits = []
    for name in files:
        path = REPO / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert hits == []
