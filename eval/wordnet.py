"""Find (or build) the English WordNet that METEOR's synonym stage needs.

``wordnet_reader()`` returns an NLTK ``WordNetCorpusReader``; it is looked up
lazily, on the first METEOR call, in this order:

1. NLTK's own data path (``nltk.data.path``, ``NLTK_DATA``), plus our cache
   ``data.io.cache_dir("nltk_data")`` which is always added to that path;
2. ``nltk.download("wordnet")`` into that cache (works when online);
3. built into the cache from Debian/Ubuntu's ``wordnet-base`` package
   (``/usr/share/wordnet``, or ``$WNSEARCHDIR``), laid out as NLTK's
   ``corpora/wordnet/``.  Debian ships the database files but not two that
   NLTK reads: ``lexnames`` (the fixed list of the 45 lexicographer files,
   written from ``LEXNAMES`` below) and ``index.sense`` (copied from the
   ``wordnet-sense-index`` package when present, otherwise generated from the
   data, index and ``cntlist.rev`` files: see ``_sense_index_lines``);
4. otherwise a one-line ``UserError`` saying how to install it.

The reader is built with no Open Multilingual Wordnet reader (``omw_reader=None``):
METEOR only asks for English synsets, so newer NLTK releases that would ask for
``omw-1.4``/``omw-2.0`` never need it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

from data.errors import UserError
from data.io import cache_dir

# The 45 WordNet 3.0 lexicographer files: (file number, name, syntactic
# category 1=noun 2=verb 3=adjective 4=adverb), as listed in lexnames(5WN).
LEXNAMES: tuple[tuple[int, str, int], ...] = (
    (0, "adj.all", 3), (1, "adj.pert", 3), (2, "adv.all", 4), (3, "noun.Tops", 1),
    (4, "noun.act", 1), (5, "noun.animal", 1), (6, "noun.artifact", 1),
    (7, "noun.attribute", 1), (8, "noun.body", 1), (9, "noun.cognition", 1),
    (10, "noun.communication", 1), (11, "noun.event", 1), (12, "noun.feeling", 1),
    (13, "noun.food", 1), (14, "noun.group", 1), (15, "noun.location", 1),
    (16, "noun.motive", 1), (17, "noun.object", 1), (18, "noun.person", 1),
    (19, "noun.phenomenon", 1), (20, "noun.plant", 1), (21, "noun.possession", 1),
    (22, "noun.process", 1), (23, "noun.quantity", 1), (24, "noun.relation", 1),
    (25, "noun.shape", 1), (26, "noun.state", 1), (27, "noun.substance", 1),
    (28, "noun.time", 1), (29, "verb.body", 2), (30, "verb.change", 2),
    (31, "verb.cognition", 2), (32, "verb.communication", 2), (33, "verb.competition", 2),
    (34, "verb.consumption", 2), (35, "verb.contact", 2), (36, "verb.creation", 2),
    (37, "verb.emotion", 2), (38, "verb.motion", 2), (39, "verb.perception", 2),
    (40, "verb.possession", 2), (41, "verb.social", 2), (42, "verb.stative", 2),
    (43, "verb.weather", 2), (44, "adj.ppl", 3),
)

DEBIAN_WORDNET_DIR = "/usr/share/wordnet"
_POS_FILES = ("noun", "verb", "adj", "adv")
_DB_FILES = tuple(f"{kind}.{pos}" for kind in ("index", "data") for pos in _POS_FILES) + tuple(
    f"{pos}.exc" for pos in _POS_FILES
)
# ss_type letter in the data files -> number used in sense keys
_SS_TYPE_NUMBER = {"n": 1, "v": 2, "a": 3, "r": 4, "s": 5}
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)")

INSTALL_HINT = (
    "WordNet (needed by METEOR) was not found: run `python -m nltk.downloader wordnet` "
    "or install the Debian/Ubuntu package wordnet-base (`apt-get install wordnet-base`)"
)


@lru_cache(maxsize=1)
def wordnet_reader():
    """The English WordNet as an NLTK ``WordNetCorpusReader`` (found or built once)."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class EnglishWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            """No mapping from WordNet 3.0's synset offsets: NLTK builds it (reading the whole sense index, 1.3 of
            the reader's 2.5 s) only for Open Multilingual Wordnet data, which this reader has none of."""
            return None

    root = find_wordnet_root()
    try:
        with warnings.catch_warnings():
            # "The multilingual functions are not available": intended (English only).
            warnings.simplefilter("ignore")
            return EnglishWordNet(root, None)
    except (OSError, ValueError, AssertionError) as e:
        raise UserError(f"{root}: unreadable WordNet ({e}); {INSTALL_HINT}") from None


def find_wordnet_root():
    """Path pointer to an NLTK ``corpora/wordnet`` directory (or zip); see module doc."""
    import nltk

    cache = cache_dir("nltk_data")
    if str(cache) not in nltk.data.path:
        nltk.data.path.append(str(cache))
    found = _nltk_find("corpora/wordnet")
    if found is not None:
        return found
    if _nltk_download("wordnet", cache):
        found = _nltk_find("corpora/wordnet")
        if found is not None:
            return found
    debian = Path(os.environ.get("WNSEARCHDIR") or DEBIAN_WORDNET_DIR)
    if all((debian / name).is_file() for name in _DB_FILES):
        build_nltk_wordnet(debian, cache / "corpora" / "wordnet")
        found = _nltk_find("corpora/wordnet")
        if found is not None:
            return found
    raise UserError(INSTALL_HINT)


def _nltk_find(resource: str):
    import nltk

    try:
        return nltk.data.find(resource)
    except LookupError:
        return None


def _nltk_download(package: str, download_dir: Path) -> bool:
    """``nltk.download`` without its console chatter; False when offline."""
    import nltk

    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return bool(
                nltk.download(
                    package, download_dir=str(download_dir), quiet=True, raise_on_error=False, print_error_to=sink
                )
            )
    except Exception:  # network/SSL/permission errors all mean "not downloadable now"
        return False


def build_nltk_wordnet(source_dir: str | os.PathLike, target_dir: str | os.PathLike) -> Path:
    """Lay out a WordNet 3.0 database directory (Debian ``wordnet-base``) as NLTK's corpus.

    Copies the index/data/exception files (and ``cntlist.rev``), writes
    ``lexnames`` and ``index.sense``; the finished directory appears atomically
    (built beside the target, then renamed), so concurrent builders are safe.
    """
    source_dir, target_dir = Path(source_dir), Path(target_dir)
    if (target_dir / "lexnames").is_file() and (target_dir / "index.sense").is_file():
        return target_dir
    missing = [name for name in _DB_FILES if not (source_dir / name).is_file()]
    if missing:
        raise UserError(f"{source_dir}: not a WordNet database directory (missing {', '.join(missing)})")
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".wordnet.", dir=target_dir.parent))
    try:
        for name in _DB_FILES + ("cntlist.rev",):
            if (source_dir / name).is_file():
                shutil.copyfile(source_dir / name, tmp / name)
        (tmp / "lexnames").write_text(
            "".join(f"{num:02d}\t{name}\t{cat}\n" for num, name, cat in LEXNAMES), encoding="utf-8"
        )
        if (source_dir / "index.sense").is_file():
            shutil.copyfile(source_dir / "index.sense", tmp / "index.sense")
        else:
            lines = _sense_index_lines(tmp)
            (tmp / "index.sense").write_text("".join(lines), encoding="utf-8")
        try:
            os.replace(tmp, target_dir)
        except OSError:
            if not (target_dir / "index.sense").is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target_dir


def _strip_adj_marker(word: str) -> str:
    """``galore(ip)`` -> ``galore``: drop the adjective position marker of data.adj."""
    return _ADJ_MARKER.sub("", word)


def _sense_index_lines(db_dir: Path) -> list[str]:
    """Lines of ``index.sense`` (senseidx(5WN)) generated from a WordNet database.

    Each line is ``sense_key synset_offset sense_number tag_cnt``, where the
    sense key is ``lemma%ss_type:lex_filenum:lex_id:head_word:head_id`` (head
    word/id only for adjective satellites: the first word of the head synset the
    satellite's ``&`` pointer names), the sense number is the synset's position
    in the lemma's entry of ``index.<pos>``, and the tag count comes from
    ``cntlist.rev`` (0 when absent); a lemma that appears twice in one synset
    with different case (``Earth``/``earth``) gets one key, for its first
    occurrence.  Lines are sorted bytewise, as the binary
    search over the file expects.
    """
    synsets: dict[tuple[str, str], tuple[int, str, list[tuple[str, int]], str | None]] = {}
    for pos in _POS_FILES:
        with open(db_dir / f"data.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue  # license header
                fields = line.split(" ")
                offset, lex_filenum, ss_type = fields[0], int(fields[1]), fields[2]
                w_cnt = int(fields[3], 16)
                words = [
                    (_strip_adj_marker(fields[4 + 2 * i]).lower(), int(fields[5 + 2 * i], 16)) for i in range(w_cnt)
                ]
                head = None
                if ss_type == "s":
                    p_at = 4 + 2 * w_cnt
                    for j in range(int(fields[p_at])):
                        symbol, target, target_pos = fields[p_at + 1 + 4 * j : p_at + 4 + 4 * j]
                        if symbol == "&":
                            head = target
                            break
                synsets[(pos, offset)] = (lex_filenum, ss_type, words, head)
    sense_number: dict[tuple[str, str, str], int] = {}
    for pos in _POS_FILES:
        with open(db_dir / f"index.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                fields = line.split()
                lemma, synset_cnt = fields[0], int(fields[2])
                for rank, offset in enumerate(fields[-synset_cnt:], start=1):
                    sense_number[(pos, lemma, offset)] = rank
    tag_count: dict[str, int] = {}
    cntlist = db_dir / "cntlist.rev"
    if cntlist.is_file():
        with open(cntlist, encoding="utf-8") as f:
            for line in f:
                key, _, count = line.split()
                # cntlist.rev keeps adjective markers in head words ("some(a)")
                tag_count[_ADJ_MARKER.sub("", key)] = int(count)
    lines = []
    for (pos, offset), (lex_filenum, ss_type, words, head) in synsets.items():
        head_part = ":"
        if ss_type == "s" and head is not None:
            head_word, head_id = synsets[("adj", head)][2][0]
            head_part = f"{head_word}:{head_id:02d}"
        seen: set[str] = set()
        for lemma, lex_id in words:
            if lemma in seen:  # "Earth 0 earth 2": one sense key per lower-cased lemma
                continue
            seen.add(lemma)
            key = f"{lemma}%{_SS_TYPE_NUMBER[ss_type]}:{lex_filenum:02d}:{lex_id:02d}:{head_part}"
            number = sense_number.get((pos, lemma, offset), 0)
            lines.append(f"{key} {offset} {number} {tag_count.get(key, 0)}\n")
    lines.sort(key=lambda s: s.encode("utf-8"))
    return lines
