"""Where the kit finds a Chinese font: the Simplified Chinese face of Noto Sans CJK (SIL Open Font License), as
Debian's ``fonts-noto-cjk`` installs it.  The book's webfont (``book/_ext/pk_cjk_font.py``) is cut from it, and
the figures' Chinese labels are drawn with it (:mod:`.editions`).

Why a face cut out of the collection: matplotlib reads only the first face of a ``.ttc`` (Japanese, in Noto's),
whose forms of some Han characters are not the ones a Chinese reader expects; so the SC face is subset with
fontTools to the characters the figures use and registered with matplotlib from a file of its own.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import tempfile
from pathlib import Path

FONT_DIR_ENV = "PIPELINE_KIT_CJK_FONT_DIR"
# Where distributions install the Noto CJK collections: Debian and Ubuntu (fonts-noto-cjk), Arch (noto-fonts-cjk).
FONT_DIRS = ("/usr/share/fonts/opentype/noto", "/usr/share/fonts/noto-cjk")
SOURCE_FAMILY = "Noto Sans CJK SC"  # the Simplified Chinese face of each collection (it holds ten faces)
STYLES = ("Regular", "Bold")


def font_folders() -> list[Path]:
    override = os.environ.get(FONT_DIR_ENV)
    return [Path(override)] if override else [Path(d) for d in FONT_DIRS]


def source_fonts() -> dict[str, Path] | None:
    """The Noto Sans CJK collections (style -> path), or None where this machine has none."""
    for folder in font_folders():
        found = {style: folder / f"NotoSansCJK-{style}.ttc" for style in STYLES}
        if all(path.is_file() for path in found.values()):
            return found
    return None


def face_index(path: Path) -> int:
    """Which face of the collection is Noto Sans CJK SC (Debian's holds JP, KR, SC, TC, HK and their Mono)."""
    from fontTools.ttLib import TTCollection

    for i, font in enumerate(TTCollection(str(path), lazy=True).fonts):
        if font["name"].getDebugName(1) == SOURCE_FAMILY:
            return i
    raise ValueError(f"{path} has no {SOURCE_FAMILY} face")


FIGURE_FAMILY = "Noto Sans CJK SC (pipeline-kit figures)"


@functools.lru_cache(maxsize=1)
def _cache_folder() -> Path:
    """This user's folder of cut fonts under the temporary folder, kept between builds -- or, where that name is
    taken by a link or by someone else's folder (a shared /tmp), a private one of this process's."""
    folder = Path(tempfile.gettempdir()) / f"pipeline-kit-fonts-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & 0o022:
        return folder
    return Path(tempfile.mkdtemp(prefix="pipeline-kit-fonts-"))


@functools.lru_cache(maxsize=8)
def matplotlib_family(chars: str) -> str | None:
    """A font family matplotlib can draw ``chars`` with (cut and registered once per set of characters: a family
    name of its own each), or None where this machine has no Noto Sans CJK: then a figure stays in English rather
    than showing boxes."""
    found = source_fonts()
    if found is None:
        return None
    from fontTools import subset
    from matplotlib import font_manager

    wanted = "".join(sorted(set(chars) | set("，。、；：？！（）—…·")))
    key = hashlib.sha256(f"{found['Regular']}|{wanted}".encode()).hexdigest()[:16]
    target = _cache_folder() / f"NotoSansCJKsc-{key}.otf"
    if not target.is_file():
        opts = subset.Options()
        opts.font_number = face_index(found["Regular"])
        opts.name_IDs = ["*"]
        opts.notdef_outline = True
        font = subset.load_font(str(found["Regular"]), opts)
        subsetter = subset.Subsetter(opts)
        subsetter.populate(unicodes=sorted(ord(c) for c in wanted))
        subsetter.subset(font)
        for record in font["name"].names:  # its own family name: never mistaken for a full font of the system's
            if record.nameID in (1, 4, 16):
                record.string = f"{FIGURE_FAMILY} {key}"
        partial = target.with_suffix(f".{os.getpid()}.part")
        subset.save_font(font, str(partial), opts)
        os.replace(partial, target)
    font_manager.fontManager.addfont(str(target))
    return f"{FIGURE_FAMILY} {key}"
