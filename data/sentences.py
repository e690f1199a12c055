"""ReQA's sentence breaker for SQuAD/Wikipedia paragraphs.

ReQA (Ahmad, Constant, Yang & Cer 2019, "ReQA: An Evaluation for End-to-End
Answer Retrieval Models") splits SQuAD paragraphs into sentences with a
sed-style cascade of regular-expression rewrites: newlines are inserted at
candidate breaks, some are taken back (titles, abbreviations, initials...) and
a few more are added (common sentence starts, SQuAD-specific cases).  The
candidate counts that ReQA reports (10,250 sentences on SQuAD v1.1 dev) depend
on every rule, so this module applies the same cascade, in the same order.

Public function: :func:`reqa_sentence_breaks`.
"""

from __future__ import annotations

import re

_RDQ, _LDQ, _BULLET = "\u201d", "\u201c", "\u2022"

# Each stage is (why, pattern, replacement).  A "\n" in the working text marks a
# sentence break; the stages run in order on one line of text.
_CASCADE: list[tuple[str, str, str]] = [
    # 1. Break after [.?!] (+ closing quotes/brackets/spaces), white space, an
    #    optional opening quote/bracket and an upper-case letter or digit.
    ("main split", r"""([.?!][)'" %s]*)\s(\s*[\['"(%s]?[A-Z0-9])""" % (_RDQ, _LDQ), r"\1\n\2"),
    # 2. Wikipedia editorial scraps after the full stop ([citation needed],
    #    [note 1], [c]...), possibly stacked.
    ("wiki scraps", r"""([.?!]['"]?)((\[[a-zA-Z0-9 ?]+\])+)\s(\s*['"(]?[A-Z0-9])""", r"\1\2\n\4"),
    # 3. Elided text "[...]" inside multi-sentence quotations.
    ("wiki ellipsis", r"(\[\.\.\.\]\s*)\s(\[?[A-Z])", r"\1\n\2"),
    # 4. Re-join after titles, literary / month / geographic abbreviations.
    ("titles", r"\b(Mrs?|Ms|Dr|Prof|Fr|Rev|Msgr|Sta?)\.\n", r"\1. "),
    ("ranks", r"\b(Lt|Gen|Col|Maj|Adm|Capt|Sgt|Rep|Gov|Sen|Pres)\.\n", r"\1. "),
    ("literary", r"\b(e\.g|i\.?e|vs?|pp?|cf|a\.k\.a|approx|app|es[pt]|tr)\.\n", r"\1. "),
    ("months", r"\b(Jan|Aug|Oct|Nov|Dec)\.\n", r"\1. "),
    ("places", r"\b(Mt|Ft)\.\n", r"\1. "),
    ("time zones", r"\b([ap]\.m)\.\n(Eastern|EST)\b", r"\1. \2"),
    # 5. Re-join personal names written with 3, 2 or 1 initials.
    ("3 initials", r"""\b([A-Z]\.)[ \n]([A-Z]\.)[ \n]([A-Z]\.)[ \n]("?[A-Z][a-z])""", r"\1 \2 \3 \4"),
    ("2 initials", r"""\b([A-Z]\.)[ \n]([A-Z]\.)[ \n]("?[A-Z][a-z])""", r"\1 \2 \3"),
    ("joined initials", r"""\b([A-Z]\.[A-Z]\.)\n("?[A-Z][a-z])""", r"\1 \2"),
    ("1 initial", r"""\b([A-Z]\.)\n("?[A-Z][a-z])""", r"\1 \2"),
    # 6. Re-split before common sentence openers.
    ("openers: determiners", r"""([.!?]['")]*) (The|This|That|These|It) """, r"\1\n\2 "),
    ("openers: adverbs", r"(\.) (Meanwhile|However)", r"\1\n\2"),
    (
        "openers: prepositions",
        r"(\.) (In|On|By|During|After|Under|Although|Yet|As |Several|According to) ",
        r"\1\n\2 ",
    ),
    # 7. Re-join numbered parts, life dates, "et al. (2005)", "H.R. 2000".
    ("numbered parts", r"\b([Aa]rt|[Nn]o|Opp?|ch|Sec|cl|Rec|Ecl|Cor|Lk|Jn|Vol)\.\n([0-9IVX]+)\b", r"\1. \2"),
    ("life dates", r"\b([bdrc]|ca|fl)\.\n([A-Z0-9])", r"\1. \2"),
    ("et al", r"\b(et al)\.\n(\(?[0-9]{4}\b)", r"\1. \2"),
    ("bills", r"\b(H\.R\.)\n([0-9])", r"\1 \2"),
    # 8. SQuAD-specific joins.
    ("squad: I Am...", r"(I Am\.\.\.)\n(Sasha Fierce|World Tour)", r"\1 \2"),
    ("squad: Warner Bros.", r"(Warner Bros\.)\n(Records|Entertainment)", r"\1 \2"),
    ("squad: U.S. + number", r"(U\.S\.)\n(\(?\d\d+)", r"\1 \2"),
    ("squad: rupees", r"\b(Rs\.)\n(\d)", r"\1 \2"),
    # 9. SQuAD-specific splits.
    ("squad: Jay Z.", r"\b(Jay Z\.) ([A-Z])", r"\1\n\2"),
    ("squad: D.C.", r"\b(Washington, D\.C\.) ([A-Z])", r"\1\n\2"),
    ("squad: for 4.)", r"\b(for 4\.\)) ([A-Z])", r"\1\n\2"),
    ("squad: Wii U.", r"\b(Wii U\.) ([A-Z])", r"\1\n\2"),
    ("squad: iPod/iTunes", r"\. (iPod|iTunes)", r".\n\1"),
    ("squad: [...] break", r" (\[\.\.\.\]\n)", r"\n\1"),
    ("squad: M.Sc.", r"(\.Sc\.)\n", r"\1 "),
    ("squad: bullets", r" (%s [A-Z])" % _BULLET, r"\n\1"),
]

_COMPILED = [(re.compile(pattern), repl) for _, pattern, repl in _CASCADE]
_LINE_START = re.compile(r"^\s*", re.M)


def mark_breaks(text: str) -> str:
    """Return ``text`` (newlines turned into spaces) with ``\\n`` at every break."""
    out = text.replace("\n", " ")
    for pattern, repl in _COMPILED:
        out = pattern.sub(repl, out)
    return out


def reqa_sentence_breaks(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``, as ReQA splits it.

    Every rewrite in the cascade only swaps a space for a newline or back, so
    offsets in the marked text are offsets in the original.  A sentence span
    skips its leading and trailing white space, the way ReQA strips sentences.
    """
    marked = mark_breaks(text)
    spans = []
    line_starts = [m.end() for m in _LINE_START.finditer(marked)]
    for start, line in zip(line_starts, marked.split("\n")):
        spans.append((start, start + len(line.strip())))
    return spans


def reqa_sentences(text: str) -> list[str]:
    """The sentence strings of ``text`` (see :func:`reqa_sentence_breaks`)."""
    return [text[s:e] for s, e in reqa_sentence_breaks(text)]
