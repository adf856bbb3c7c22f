"""The README is a newcomer's first page: short, with the two test commands CI and developers read from it, and
links that lead somewhere.

``.ci/run`` runs the line after the ``test-command`` marker's fence; the quick subset sits after its own marker
in the same shape, so both are found the same way.  Everything else lives in the book, which the README links
by its source pages, and each link must name a file of the repository.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 250


def lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def test_the_readme_is_at_most_250_lines():
    assert len(lines()) <= MAX_LINES, f"README.md has {len(lines())} lines; move the detail into the book"


def command_after(marker: str) -> str:
    """The one command line in the ```bash fence right after ``<!-- marker -->``."""
    text = lines()
    where = [i for i, line in enumerate(text) if line.strip() == f"<!-- {marker} -->"]
    assert len(where) == 1, f"README.md should have the marker <!-- {marker} --> once, has it {len(where)} times"
    i = where[0]
    assert text[i + 1:i + 2] == ["```bash"], f"<!-- {marker} --> must be followed by a ```bash fence"
    assert text[i + 3:i + 4] == ["```"], f"the fence after <!-- {marker} --> must hold exactly one line"
    command = text[i + 2]
    assert command.strip() and not command.startswith(("#", "$")), f"not a command: {command!r}"
    return command


def test_the_test_command_follows_its_marker():
    command = command_after("test-command")
    assert command.startswith(".venv/bin/ruff check") and "pytest" in command, command


def test_the_quick_test_command_follows_its_marker():
    command = command_after("quick-test-command")
    assert "pytest" in command and "not slow" in command, command


def test_ci_reads_the_same_test_command():
    """.ci/run takes the second line after the marker (awk: getline twice); it must be the command above."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "/<!-- test-command -->/{getline; getline; print; exit}" in script
    text = lines()
    i = text.index("<!-- test-command -->")
    assert text[i + 2] == command_after("test-command")


def links() -> list[str]:
    text = README.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # commands in fences are not links
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'(?:src|href)="([^"]+)"', text)


def test_every_link_names_a_file_that_exists():
    found = links()
    assert found, "the README links into the book"
    missing = []
    for target in found:
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path = target.split("#", 1)[0]
        if path and not (ROOT / path).exists():
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_picture_says_which_command_made_it():
    pictures = [t for t in links() if t.startswith("docs/")]
    assert pictures, "the README shows a picture made by the kit"
    text = README.read_text(encoding="utf-8")
    for picture in pictures:
        assert re.search(rf"python -m pipeline_kit draw [^\n]*-o {re.escape(picture)}", text), \
            f"{picture}: the README should give the command that made it"
