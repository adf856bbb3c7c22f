"""Who handed in what: a class's notebooks found from the command line, each with its student, lab and seed.

Why one place decides it: the batch grade, the gradebook, nbgrader's database and ``--shard`` must agree on
who a notebook belongs to and which slice grades it, or a merged gradebook would drop or double a student.
The rules, in the order the README states them:

* a **folder** argument holds one folder per student (``CLASS/<student>/**/*.ipynb``, the shape of nbgrader's
  ``submitted/<student>/<assignment>/`` and of most LMS downloads); a notebook right inside it is a student of
  its own, named by its file (``CLASS/alice.ipynb`` is ``alice``) -- unless the file is named after a lab
  (``alice/lab03_bubble.ipynb``, one student's folder given alone: the student is the folder's name);
* a **file** argument belongs to the student its folder is named after (``alice/lab03_bubble.ipynb``);
* ``--nbgrader COURSE`` takes ``COURSE/submitted/<student>/<assignment>/*.ipynb`` (``--assignment`` keeps one);
* the lab is the notebook's own (its metadata or file name, :func:`.notebook.lab_name`); a notebook that is
  no lab is kept as a row with its reason, so one bad file never stops a class;
* one student hands in a lab once: two notebooks for the same student and lab are refused before any grade.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import UsageError
from .notebook import LAB_NAME, GradeError, lab_name, read_notebook, source_dir

SKIPPED_FOLDERS = (".ipynb_checkpoints",)
MAX_NOTEBOOKS = 100_000  # a class's notebooks per command (a folder naming more is refused before any grade)
SECRET_BYTES = (16, 4096)  # a --course-secret file's size: at least 16 bytes of secret, at most 4 KiB


@dataclass
class Submission:
    """One notebook to grade: whose it is, for which lab (None where it is no lab: ``problem`` says why)."""

    path: Path
    student: str
    lab: str | None = None
    assignment: str | None = None   # nbgrader's assignment name, where the notebook came from a course
    notebook_id: str | None = None  # nbgrader's notebook name (the file's stem)
    problem: str | None = None
    seed: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        """What a gradebook row is keyed by: the student and the lab (the file's name where it is no lab)."""
        return self.student, self.lab or self.path.stem


def _notebooks(folder: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
        found += [Path(root) / f for f in sorted(files) if f.endswith(".ipynb") and not f.startswith(".")]
        if len(found) > MAX_NOTEBOOKS:
            raise UsageError(f"argument NOTEBOOK: {folder} holds more than {MAX_NOTEBOOKS:,} notebooks; grade it "
                             "in parts (--shard K/N)")
    return found


def from_arguments(paths: list[str]) -> list[Submission]:
    """The notebooks the ``NOTEBOOK`` arguments name (files and class folders), with their students."""
    subs = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            notebooks = _notebooks(path)
            if not notebooks:
                raise UsageError(f"argument NOTEBOOK: the folder {arg} holds no .ipynb notebook")
            for nb in notebooks:
                rel = nb.relative_to(path)
                if len(rel.parts) > 1:
                    student = rel.parts[0]
                else:  # right inside: a student's own folder when the file is named after a lab
                    student = path.resolve().name if LAB_NAME.match(nb.stem) else nb.stem
                subs.append(Submission(nb, student))
        elif path.is_file():
            subs.append(Submission(path, path.resolve().parent.name or path.stem))
        else:
            raise UsageError(f"argument NOTEBOOK: no such file or folder: {arg}")
    return subs


def from_nbgrader(course: str, assignment: str | None) -> list[Submission]:
    """``COURSE/submitted/<student>/<assignment>/*.ipynb``, nbgrader's tree of collected submissions."""
    submitted = Path(course) / "submitted"
    if not Path(course).is_dir():
        raise UsageError(f"argument --nbgrader: no such course folder: {course}")
    if not submitted.is_dir():
        raise UsageError(f"argument --nbgrader: {course} has no submitted/ folder (nbgrader collect, or "
                         "nbgrader zip_collect, puts the students' notebooks there)")
    subs = []
    for student in sorted(p for p in submitted.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for folder in sorted(p for p in student.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if assignment is not None and folder.name != assignment:
                continue
            for nb in sorted(folder.glob("*.ipynb")):
                subs.append(Submission(nb, student.name, assignment=folder.name, notebook_id=nb.stem))
    if not subs:
        wanted = f" for assignment {assignment!r}" if assignment else ""
        raise UsageError(f"argument --nbgrader: {submitted} holds no submitted notebook{wanted} "
                         "(expected submitted/<student>/<assignment>/<notebook>.ipynb)")
    return subs


def identify(subs: list[Submission], sources: Path | None) -> list[Submission]:
    """Each notebook's lab, read from the notebook (a notebook that is no lab keeps its reason), and the refusal
    of two notebooks for one student and lab."""
    sources = sources or source_dir()
    seen: dict[tuple[str, str], Path] = {}
    for sub in subs:
        try:
            sub.lab = lab_name(read_notebook(sub.path), sub.path, sources)
        except GradeError as exc:
            sub.problem = str(exc)
        if sub.key in seen:
            raise UsageError(f"argument NOTEBOOK: two notebooks of student {sub.student!r} for {sub.key[1]}: "
                             f"{seen[sub.key]} and {sub.path} (one per student and lab; put each student's "
                             "notebooks in a folder named after them)")
        seen[sub.key] = sub.path
    return subs


# -- which slice, which seed -------------------------------------------------------------------------------------

SHARD = re.compile(r"(\d{1,6})/(\d{1,6})\Z")


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` (1 <= K <= N): the K-th of N slices."""
    match = SHARD.match(text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ValueError(f"expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def shard_of(key: tuple[str, str], n: int) -> int:
    """The slice (1..n) a student's lab belongs to: a digest of the student and the lab, so a slice depends on no
    other notebook (machines that list the class in another order, or see one more late submission, still
    agree) and a class spreads evenly."""
    digest = hashlib.sha256("\0".join(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def read_secret(path: str) -> bytes:
    """A ``--course-secret`` file's bytes (whitespace at the ends dropped), checked for size first."""
    try:
        size = os.stat(path).st_size
        if not os.path.isfile(path):
            raise UsageError(f"argument --course-secret: {path} is not a regular file")
        if size > SECRET_BYTES[1]:
            raise UsageError(f"argument --course-secret: {path} has {size:,} bytes; a secret file holds at most "
                             f"{SECRET_BYTES[1]:,}")
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise UsageError(f"argument --course-secret: cannot read {path}: {exc.strerror or exc}") from None
    if len(secret) < SECRET_BYTES[0]:
        raise UsageError(f"argument --course-secret: {path} holds {len(secret)} bytes; use at least "
                         f"{SECRET_BYTES[0]} random ones (e.g. `openssl rand -hex 32 > {path}`)")
    return secret


def course_seed(secret: bytes, student: str, lab: str) -> int:
    """The seed of a student's hidden cases for a lab: an HMAC of the student and the lab under the course's
    secret -- the same on every regrade, and unpredictable to whoever does not hold the secret."""
    mac = hmac.new(secret, f"pipeline-kit seed\0{student}\0{lab}".encode(), hashlib.sha256).digest()
    return int.from_bytes(mac[:4], "big") % 2**31


def assign_seeds(subs: list[Submission], seed: int | None, secret: bytes | None) -> None:
    for sub in subs:
        if secret is not None:
            sub.seed = course_seed(secret, *sub.key)
        else:
            sub.seed = seed if seed is not None else secrets.randbelow(2**31)
