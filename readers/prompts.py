"""Prompts of the generative reader: template files, passage order, few-shot examples, answer clean-up.

A template is a small YAML file (``readers/prompts/*.yaml`` ship two; any path works)::

    prompt: |-                      # {question} and {passages} are filled in
      Question: {question}
      {passages}Answer:
    passage: "Passage {index}: {text}\\n"   # one per passage, {index} = 1, 2, ... in prompt order
    closed_book: ""                 # what {passages} becomes when n = 0
    example_end: "\\n\\n"            # after a few-shot example's answer

The prompt is built as segments: ``head`` (the few-shot examples, then the prompt up to ``{passages}``), one
segment per passage, and ``tail`` (the rest of the prompt).  For a checkpoint with a chat template the whole
text is the user turn: the template's own text before the turn goes in front of ``head`` and its generation
prompt after ``tail``.  Each segment is tokenized on its own and the token ids are concatenated, so the
prompt for the top n + 1 passages in rank order starts with exactly the tokens of the prompt's head and
first n passages: the n-sweep reuses their key-value cache (:mod:`readers.generative`).

Passage orders: ``rank`` (retrieval order), ``reversed`` (strongest last, nearest the answer) and
``lost-in-the-middle`` (strongest at both ends, weakest in the middle: ranks 1, 3, 5, ... then ..., 6, 4, 2;
Liu et al., 2024, "Lost in the Middle: How Language Models Use Long Contexts", TACL 12).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from data.errors import UserError

PROMPTS_DIR = Path(__file__).with_name("prompts")
BUILTIN_TEMPLATES = {"short-answer": PROMPTS_DIR / "short-answer.yaml", "few-shot": PROMPTS_DIR / "few-shot.yaml"}
ORDERS = ("rank", "reversed", "lost-in-the-middle")
_FIELDS = {"prompt": None, "passage": "Passage {index}: {text}\n", "closed_book": "", "example_end": "\n\n"}


@dataclass(frozen=True)
class Example:
    """A few-shot example: a training question, the passage that answers it and its answer."""

    question: str
    passage: str
    answer: str


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt template (see the module doc); ``text`` is the file's content (part of the reader's identity)."""

    name: str
    prompt: str
    passage: str
    closed_book: str
    example_end: str
    text: str

    @classmethod
    def load(cls, spec: str | None) -> "PromptTemplate":
        """A built-in template by name (``short-answer``, ``few-shot``) or a YAML file by path."""
        import yaml

        path = BUILTIN_TEMPLATES.get(str(spec)) or Path(str(spec)).expanduser()
        if not path.is_file():
            raise UserError(f"prompt template {spec!r}: no such file (built-in: {', '.join(BUILTIN_TEMPLATES)})")
        try:
            text = path.read_text(encoding="utf-8")
            data = yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise UserError(f"{path}: unreadable prompt template ({' '.join(str(err).split())[:120]})") from None
        if not isinstance(data, dict):
            raise UserError(f"{path}: a prompt template is a mapping with a 'prompt' field")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise UserError(f"{path}: unknown field {unknown[0]!r} (fields: {', '.join(_FIELDS)})")
        values = {}
        for field, default in _FIELDS.items():
            value = data.get(field, default)
            if not isinstance(value, str):
                raise UserError(f"{path}: field {field!r} must be a string")
            values[field] = value
        prompt = values["prompt"]
        for slot in ("{question}", "{passages}"):
            if prompt.count(slot) != 1:
                raise UserError(f"{path}: field 'prompt' must hold {slot} exactly once")
        if "{text}" not in values["passage"]:
            raise UserError(f"{path}: field 'passage' must hold {{text}}")
        name = str(spec) if str(spec) in BUILTIN_TEMPLATES else str(path)
        return cls(name=name, text=text, **values)

    def render_passage(self, index: int, text: str) -> str:
        return self.passage.replace("{index}", str(index)).replace("{text}", text)

    def parts(self, question: str, passages: Sequence[str], examples: Sequence[Example] = ()) -> tuple[str, list[str], str]:
        """``(head, passage segments, tail)``: the prompt for ``passages`` (already in prompt order)."""
        before, after = self.prompt.split("{passages}")
        head = "".join(self.example_text(e) for e in examples) + before.replace("{question}", question)
        blocks = [self.render_passage(i + 1, p) for i, p in enumerate(passages)]
        if not blocks:
            head += self.closed_book
        return head, blocks, after.replace("{question}", question)

    def example_text(self, example: Example) -> str:
        head, blocks, tail = self.parts(example.question, [example.passage])
        return head + "".join(blocks) + tail + " " + example.answer + self.example_end


def order_passages(passages: Sequence[str], order: str) -> list[str]:
    """The passages (given in rank order) in the prompt order ``order`` (one of :data:`ORDERS`)."""
    passages = list(passages)
    if order == "rank":
        return passages
    if order == "reversed":
        return passages[::-1]
    if order == "lost-in-the-middle":
        return passages[0::2] + passages[1::2][::-1]
    raise UserError(f"reader order={order!r}: use {', '.join(ORDERS)}")


_LABEL = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)


def clean_answer(generated: str) -> str:
    """The answer in a generation: its first line, without surrounding white space and one leading ``Answer:``
    label.  Nothing else is changed (EM and F1 normalize case, punctuation and articles themselves)."""
    line = generated.strip().split("\n", 1)[0]
    return _LABEL.sub("", line, count=1).strip()
