"""ReQA sentence breaker (data/sentences.py): one case per cascade rule, offsets on non-ASCII text.

Each expected split below is derived by hand from the rule it exercises (ReQA's
sed cascade: break after [.?!] + white space + upper-case/digit, then the
re-joins and re-splits in order); a case is chosen so that the result changes
when that one rule is missing.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.sentences import mark_breaks, reqa_sentence_breaks, reqa_sentences

RULE_CASES = [
    # 1. main split (also after closing ASCII quotes / brackets; opening quote/bracket/digit after)
    ("Hello there. World is big.", ["Hello there.", "World is big."]),
    ('He said "Go." Then he left.', ['He said "Go."', "Then he left."]),
    ("It was (odd.) 42 left!", ["It was (odd.)", "42 left!"]),
    ("Why? (Nobody knows.) Fine.", ["Why?", "(Nobody knows.)", "Fine."]),
    # curly quotes U+201D closing, U+201C opening
    ("Er sagte \u201eGeh.\u201d Dann ging er.", ["Er sagte \u201eGeh.\u201d", "Dann ging er."]),
    ("Es endete. \u201cNeu\u201d begann.", ["Es endete.", "\u201cNeu\u201d begann."]),
    # upper-case means ASCII A-Z only: no break before \u00c9 or a lower-case word
    ("\u00c7a va. \u00c9t\u00e9 chaud.", ["\u00c7a va. \u00c9t\u00e9 chaud."]),
    ("Done. then more.", ["Done. then more."]),
    # 2. wiki scraps, possibly stacked
    ("He won.[citation needed] Then he lost.", ["He won.[citation needed]", "Then he lost."]),
    ("He won.[1][note 2] Later he lost.", ["He won.[1][note 2]", "Later he lost."]),
    # 3. elided text, then 9. "[...]" on its own line
    ("He said [...] Then he left.", ["He said", "[...]", "Then he left."]),
    # 4. re-joins after abbreviations
    ("Mr. Smith went home.", ["Mr. Smith went home."]),
    ("Prof. Brown taught.", ["Prof. Brown taught."]),
    ("Gen. Lee won.", ["Gen. Lee won."]),
    ("See e.g. Smith for more.", ["See e.g. Smith for more."]),
    ("It rained on Jan. 5 again.", ["It rained on Jan. 5 again."]),
    ("He climbed Mt. Everest today.", ["He climbed Mt. Everest today."]),
    ("It starts at 9 a.m. Eastern time.", ["It starts at 9 a.m. Eastern time."]),
    ("It starts at 9 a.m. Western time.", ["It starts at 9 a.m.", "Western time."]),
    # 5. initials
    ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
    ("C. S. Lewis wrote it.", ["C. S. Lewis wrote it."]),
    ("J.R. Smith won.", ["J.R. Smith won."]),
    ("John F. Kennedy spoke.", ["John F. Kennedy spoke."]),
    # 6. re-splits before openers, after a re-join took the break back
    ("He arrived in Jan. The weather was cold.", ["He arrived in Jan.", "The weather was cold."]),
    ("He arrived in Jan. It was cold.", ["He arrived in Jan.", "It was cold."]),
    ("It was Jan. However, it was warm.", ["It was Jan.", "However, it was warm."]),
    ("It was Jan. In March it was warm.", ["It was Jan.", "In March it was warm."]),
    # 7. numbered parts, life dates, et al., bills
    ("See Art. 5 of the law.", ["See Art. 5 of the law."]),
    ("Smith (b. 1900) was a poet.", ["Smith (b. 1900) was a poet."]),
    ("Smith et al. 2005 showed it.", ["Smith et al. 2005 showed it."]),
    ("Smith et al. (2005) showed it.", ["Smith et al. (2005) showed it."]),
    ("The H.R. 2000 bill passed.", ["The H.R. 2000 bill passed."]),
    # 8. SQuAD joins
    ("I Am... Sasha Fierce sold well.", ["I Am... Sasha Fierce sold well."]),
    ("Warner Bros. Records signed her.", ["Warner Bros. Records signed her."]),
    ("The U.S. 500 index rose.", ["The U.S. 500 index rose."]),
    ("It costs Rs. 500 now.", ["It costs Rs. 500 now."]),
    # 9. SQuAD splits
    ("She married Jay Z. Beyonce sang.", ["She married Jay Z.", "Beyonce sang."]),
    ("He lived in Washington, D.C. Later he moved.", ["He lived in Washington, D.C.", "Later he moved."]),
    ("I bought a Wii U. Nintendo made it.", ["I bought a Wii U.", "Nintendo made it."]),
    ("It was new. iPod sales grew.", ["It was new.", "iPod sales grew."]),
    ("It was new. iTunes sales grew.", ["It was new.", "iTunes sales grew."]),
    ("He got an M.Sc. Later he left.", ["He got an M.Sc. Later he left."]),
    ("Fruit: \u2022 Apple \u2022 Banana", ["Fruit:", "\u2022 Apple", "\u2022 Banana"]),
]


@pytest.mark.parametrize("text, expected", RULE_CASES)
def test_each_cascade_rule(text, expected):
    assert reqa_sentences(text) == expected


def test_newlines_are_spaces_and_offsets_skip_white_space():
    # "\n" in the input is a space: no break before lower case, original text kept in the span
    text = "Zu\u0308rich ist scho\u0308n.\nbern auch."
    assert reqa_sentence_breaks(text) == [(0, len(text))]
    assert "\n" not in mark_breaks(text)
    # extra white space (incl. U+00A0) after a break belongs to neither sentence
    text = "  Th\u00e0nh ph\u1ed1 \u0111\u1eb9p.  \u00a0Ha Noi l\u1edbn.  "
    spans = reqa_sentence_breaks(text)
    assert [text[s:e] for s, e in spans] == ["Th\u00e0nh ph\u1ed1 \u0111\u1eb9p.", "Ha Noi l\u1edbn."]
    assert spans[0] == (2, 2 + len("Th\u00e0nh ph\u1ed1 \u0111\u1eb9p."))
    assert spans[1][0] == text.index("Ha") and spans[1][1] == text.index("l\u1edbn.") + 4
    assert mark_breaks("A.\nB.") == "A.\nB." and mark_breaks("a\nb") == "a b"


def test_single_sentence_and_empty_text():
    assert reqa_sentence_breaks("") == [(0, 0)]
    assert reqa_sentence_breaks("\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35") == [(0, 6)]


# -------------------------------------------------------------- properties ----
PIECES = ["Caf\u00e9", "na\u00efve", "\u6771\u4eac", "\u0e44\u0e17\u0e22", "Mr.", "U.S.", "It", "The",
          "a.m.", "J.", "2005", "[1]", "\u201cQ\u201d", "(x)", "\u2022", "end.", "why?", "wow!", "\u3002"]
SEPS = [" ", "  ", "\n", "\u00a0", " \t "]
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(SEPS)), max_size=12).map(
    lambda parts: "".join(p + s for p, s in parts)
)


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_spans_cover_the_text_in_order_without_edge_white_space(text):
    spans = reqa_sentence_breaks(text)
    marked = mark_breaks(text)
    assert len(marked) == len(text)
    # the cascade only swaps white space for "\n" and back
    assert all(a == b or (a.isspace() and b.isspace()) for a, b in zip(text, marked))
    assert len(spans) == marked.count("\n") + 1
    prev = 0
    for s, e in spans:
        assert prev <= s <= e <= len(text)
        assert text[prev:s].strip() == ""  # only white space between sentences
        piece = text[s:e]
        assert piece == piece.strip()
        prev = e
    assert text[prev:].strip() == ""
    assert "".join(text.split()) == "".join("".join(p.split()) for p in reqa_sentences(text))
