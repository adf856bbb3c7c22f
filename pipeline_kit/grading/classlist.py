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
* only a student's **own files** are graded (:func:`not_own`): a notebook that is a link, has a second name on the
  disk (a hard link), or lies outside its student's folder, and a student's folder that is a link, become rows
  with that reason (refused) -- links are never followed, so ``copycat/lab.ipynb -> ../alice/lab.ipynb`` never
  scores alice's work for copycat;
* the lab is the notebook's own (its metadata or file name, :func:`.notebook.lab_name`); a notebook that is
  no lab is kept as a row with its reason, so one bad file never stops a class;
* one student hands in a lab once: of two notebooks for the same student and lab, the newest is graded and its
  row names the others (:func:`keep_newest`), so one student's extra copy never stops the class;
* a name is shown as :func:`printable` text everywhere (a folder named with ``\\r``, ANSI escapes or bytes that
  are not UTF-8 is graded, under its escaped name).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import UsageError
from ..inputs import inside
from .notebook import LAB_NAME, GradeError, lab_name, read_notebook, source_dir

SKIPPED_FOLDERS = (".ipynb_checkpoints",)
MAX_NOTEBOOKS = 100_000  # a class's notebooks per command (a folder naming more is refused before any grade)
SMALL_FILE_BYTES = 4096  # a submission's timestamp.txt and submission_secret.txt: a line each
SECRET_BYTES = (16, 4096)  # a --course-secret file's size: at least 16 bytes of secret, at most 4 KiB
OWN_FILES_ONLY = "only a student's own files are graded"


def printable(text: str) -> str:
    """``text`` with every character a terminal, a spreadsheet or an HTML page could act on escaped: control
    characters (``\\r``, ``\\x1b``, ...), format characters (bidi overrides), line and paragraph separators, and
    the surrogate escapes Python gives a file name's bytes that are not UTF-8 (shown as ``\\xff``, the byte).

    Why here: a student's name comes from a folder name the student chose; escaped once, where the class list is
    read, it is valid text for every output (UTF-8 files, nbgrader's database, the terminal) and can never rewrite
    a console line.  Idempotent (a backslash is kept as it is), so a name read back from a gradebook keeps its
    identity; ordinary names, in any script, are unchanged."""
    return "".join(c if c.isprintable() else _escaped(c) for c in str(text))


def _escaped(c: str) -> str:
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's escape of the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    if c in "\t\n\r":
        return repr(c)[1:-1]
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


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
    home: Path | None = None        # the student's folder (None: a notebook that is a student of its own)
    note: str = ""                  # what a reader of the row should know (the other copies not graded)
    timestamp: str | None = None    # when it was handed in (nbgrader's timestamp.txt), ISO 8601, UTC

    def __post_init__(self) -> None:
        self.student = printable(self.student)
        if self.notebook_id is not None:
            self.notebook_id = printable(self.notebook_id)

    @property
    def key(self) -> tuple[str, str]:
        """What a gradebook row is keyed by: the student and the lab (the file's name where it is no lab)."""
        return self.student, self.lab or printable(self.path.stem)

    @property
    def shown_path(self) -> str:
        """The notebook's path as every output shows it."""
        return printable(str(self.path))


# -- only the student's own files -----------------------------------------------------------------------------------

def not_own(path: Path, home: Path | None) -> str | None:
    """Why ``path`` is not its student's own file, or None where it is.  ``home`` is the student's folder (None for
    a notebook that is a student of its own, ``CLASS/alice.ipynb``): it and every folder between it and the file
    must not be a link, and the file must be a regular file with one name on the disk, below ``home``.

    Why lstat and never follow: a link (or a hard link, which is the same file under two names) in a student's
    folder hands in someone else's file -- a classmate's notebook, the kit's ``solutions/`` -- as the student's."""
    steps = [home, *_between(home, path)] if home is not None else [path]
    for step in steps:
        try:
            st = os.lstat(step)
        except OSError as exc:
            return f"{printable(str(step))}: cannot be read ({exc.strerror or exc})"
        if stat.S_ISLNK(st.st_mode):
            what = ("the student's folder" if step == home else
                    "the folder" if step != path or os.path.isdir(step) else "the notebook")
            return (f"{what} {printable(str(step))} is a link (to {printable(_target(step))}): "
                    f"{OWN_FILES_ONLY}, never a link")
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        return f"{printable(str(path))} is not a regular file: {OWN_FILES_ONLY}"
    if st.st_nlink > 1:
        return (f"{printable(str(path))} has {st.st_nlink} names on the disk (a hard link): whose file it is "
                f"cannot be told; {OWN_FILES_ONLY} (hand in a copy)")
    if home is not None and not inside(str(path), str(home)):
        return f"{printable(str(path))} lies outside the student's folder {printable(str(home))}: {OWN_FILES_ONLY}"
    return None


def _between(home: Path, path: Path) -> list[Path]:
    """The folders below ``home`` down to ``path``, and ``path`` itself."""
    return [home.joinpath(*path.relative_to(home).parts[:n]) for n in range(1, len(path.relative_to(home).parts) + 1)]


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _own(sub: Submission) -> Submission:
    """``sub`` with its problem set where it is not the student's own file (see :func:`not_own`)."""
    sub.problem = not_own(sub.path, sub.home)
    return sub


def _linked_folder(path: Path, student: str, home: Path | None = None) -> Submission:
    """A row for a student's folder (``home`` None), or a folder in it (an nbgrader assignment's), that is a link:
    never listed, never followed."""
    home = path if home is None else home
    return Submission(path, student, home=home, problem=not_own(path, home))


# -- finding the notebooks ------------------------------------------------------------------------------------------

def _notebooks(folder: Path) -> list[Path]:
    """The notebooks below ``folder`` and every link right inside it that is a folder (a student's folder that is
    a link: a row of its own).  A linked folder is never entered (``os.walk`` does not follow links)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
        if Path(root) == folder:
            found += [folder / d for d in dirs if os.path.islink(folder / d)]
        found += [Path(root) / f for f in sorted(files) if f.endswith(".ipynb") and not f.startswith(".")]
        if len(found) > MAX_NOTEBOOKS:
            raise UsageError(f"argument NOTEBOOK: {printable(str(folder))} holds more than {MAX_NOTEBOOKS:,} "
                             "notebooks; grade it in parts (--shard K/N)")
    return found


def from_arguments(paths: list[str]) -> list[Submission]:
    """The notebooks the ``NOTEBOOK`` arguments name (files and class folders), with their students."""
    subs = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            notebooks = _notebooks(path)
            if not notebooks:
                raise UsageError(f"argument NOTEBOOK: the folder {printable(arg)} holds no .ipynb notebook")
            subs += [_from_folder(path, nb) for nb in notebooks]
        elif path.is_file() or path.is_symlink():
            home = Path(os.path.abspath(path)).parent
            if home.parent.parent.name == "submitted":  # nbgrader's submitted/<student>/<assignment>/: the student's
                home = home.parent
            subs.append(_own(Submission(path, home.name or path.stem, home=home)))
        else:
            raise UsageError(f"argument NOTEBOOK: no such file or folder: {printable(arg)}")
    return subs


def _from_folder(folder: Path, nb: Path) -> Submission:
    """A notebook found in a folder argument, with its student and the student's folder."""
    rel = nb.relative_to(folder)
    if len(rel.parts) > 1 or nb.is_dir():  # CLASS/<student>/..., or a student's folder that is a link
        home = folder / rel.parts[0]
        return _linked_folder(nb, rel.parts[0]) if nb.is_dir() else _own(Submission(nb, rel.parts[0], home=home))
    if LAB_NAME.match(nb.stem):  # right inside: a student's own folder given alone, the file named after a lab
        return _own(Submission(nb, Path(os.path.abspath(folder)).name, home=folder))
    return _own(Submission(nb, nb.stem))


def from_nbgrader(course: str, assignment: str | None, students: list[str] | None = None,
                  files: list[str] | None = None) -> list[Submission]:
    """``COURSE/submitted/<student>/<assignment>/*.ipynb``, nbgrader's tree of collected submissions (only
    ``students``' where given; only the notebooks ``files`` names where given), each with its ``timestamp.txt``."""
    submitted = Path(course) / "submitted"
    if not Path(course).is_dir():
        raise UsageError(f"argument --nbgrader: no such course folder: {printable(course)}")
    if not submitted.is_dir():
        raise UsageError(f"argument --nbgrader: {printable(course)} has no submitted/ folder (nbgrader collect, or "
                         "nbgrader zip_collect, puts the students' notebooks there)")
    wanted = {os.path.realpath(f) for f in files or []}
    outside = [f for f in files or [] if not inside(f, str(submitted))]
    if outside:
        raise UsageError(f"argument NOTEBOOK: with --nbgrader, a notebook named is one of the course's "
                         f"submissions, in {printable(str(submitted))}; {printable(outside[0])} is not")
    subs = []
    for student in sorted(p for p in submitted.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if students and student.name not in students:
            continue
        if student.is_symlink():
            subs.append(_linked_folder(student, student.name))
            continue
        for folder in sorted(p for p in student.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if assignment is not None and folder.name != assignment:
                continue
            if folder.is_symlink():  # (no notebook id: nothing to record in nbgrader's database)
                subs.append(_linked_folder(folder, student.name, home=student))
                continue
            for nb in sorted(folder.glob("*.ipynb")):
                if wanted and os.path.realpath(nb) not in wanted:
                    continue
                sub = _own(Submission(nb, student.name, assignment=folder.name, notebook_id=nb.stem, home=student))
                _timestamp(sub, folder)
                subs.append(sub)
    if not subs and not students:
        what = f" for assignment {printable(repr(assignment))}" if assignment else ""
        raise UsageError(f"argument --nbgrader: {printable(str(submitted))} holds no submitted notebook{what} "
                         "(expected submitted/<student>/<assignment>/<notebook>.ipynb)")
    return subs


def _timestamp(sub: Submission, folder: Path) -> None:
    when, problem = timestamp(folder)
    sub.timestamp = when.isoformat(sep=" ") if when else None
    sub.note = "; ".join(t for t in (sub.note, problem) if t)


def identify(subs: list[Submission], sources: Path | None) -> list[Submission]:
    """Each notebook's lab, read from the notebook (a notebook that is no lab, or not the student's own, keeps its
    reason and is never read), then one notebook per student and lab (:func:`keep_newest`)."""
    sources = sources or source_dir()
    for sub in subs:
        if sub.problem is not None:
            continue
        try:
            sub.lab = lab_name(read_notebook(sub.path), sub.path, sources)
        except GradeError as exc:
            sub.problem = printable(str(exc))
    return keep_newest(subs)


def keep_newest(subs: list[Submission]) -> list[Submission]:
    """One submission per student and lab: where a student handed in two or more, the newest (by modification
    time; of equal times, the last by path) is graded and its row's note names the others, which are not graded.

    Why not refuse: one student's extra copy (``bob/lab02_timelines (copy).ipynb``) must not stop the class, and
    the newest is what a student who saved again meant to hand in; the note lets the instructor check."""
    by_key: dict[tuple[str, str], list[Submission]] = {}
    for sub in subs:
        by_key.setdefault(sub.key, []).append(sub)
    dropped = set()
    for same in by_key.values():
        if len(same) < 2:
            continue
        same.sort(key=lambda s: (_mtime(s.path), str(s.path)))
        kept, others = same[-1], same[:-1]
        dropped |= {id(s) for s in others}
        kept.note = (f"{len(same)} notebooks for {kept.key[1]}: graded the newest, {_relative(kept)}; not graded: "
                     + ", ".join(_relative(s) for s in others))
    return [s for s in subs if id(s) not in dropped]


def _mtime(path: Path) -> int:
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return 0


def _relative(sub: Submission) -> str:
    """The file as the student knows it: its path inside the student's folder (its name, without one)."""
    rel = sub.path.relative_to(sub.home) if sub.home is not None and sub.path != sub.home else Path(sub.path.name)
    return printable(str(rel))


# -- when it was handed in ----------------------------------------------------------------------------------------

def small_file(path: Path) -> str | None:
    """A ``timestamp.txt`` or ``submission_secret.txt`` of a submission: its text, or None where there is none.  Read
    as any input is: a regular file (never a link, FIFO or device), at most :data:`SMALL_FILE_BYTES`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > SMALL_FILE_BYTES:
        raise ValueError(f"{printable(str(path))} is not a small regular file")
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(SMALL_FILE_BYTES)


def timestamp(folder: Path) -> tuple[datetime.datetime | None, str]:
    """When the submission in ``folder`` was handed in (nbgrader's ``timestamp.txt``, parsed by nbgrader's own
    ``parse_utc``: naive UTC, as its database keeps it), and a problem to note where it cannot be read."""
    from nbgrader.utils import parse_utc
    try:
        text = small_file(folder / "timestamp.txt")
        return (parse_utc(text.strip()) if text and text.strip() else None), ""
    except (ValueError, OverflowError) as exc:
        return None, f"timestamp.txt cannot be read ({printable(str(exc))[:120]}): no late penalty applied"


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
