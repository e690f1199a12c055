"""A third-party reader registered by entry point only: it answers with the first words of the top passage read
(a set reader: it sees a question's top n passages together, as a generative reader does)."""

import numpy as np

from readers.generative import Generations


class FirstWordsReader:
    reads = "set"

    def __init__(self, model: str = "3", device: str = "auto", dtype: str = "auto"):
        self.model = model  # the spec's MODEL: how many words
        self.words = int(model)

    def identity(self) -> str:
        return f"first-words:{self.words}"

    def load(self):
        return self

    def facts(self) -> dict:
        return {"reader_kind": "first-words", "reader_words": self.words}

    def generate(self, questions, passages, cache=None) -> Generations:
        texts = [" ".join(p[0].split()[: self.words]) if p else "" for p in passages]
        count = len(texts)
        return Generations(texts, texts, np.zeros(count, np.float32), np.array([sum(len(x.split()) for x in p) for p in passages]),
                           np.array([len(t.split()) for t in texts]), np.zeros(count), n_read=count)

    def generate_every_n(self, questions, passages, n_max, cache=None):
        return [self.generate(questions, [p[:n] for p in passages]) for n in range(n_max + 1)]
