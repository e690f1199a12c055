"""The Python API accepts no argument it then ignores, and its defaults are the commands'.

Every documented keyword of every public function of :mod:`pipeline.api` (``__all__``) -- its parameters, and the
documented keys of its ``**`` parameter (a loader's options, BERT-F1's, the ``ReaderConfig`` fields
``make_reader`` takes, field-path overrides) -- has a probe below that shows it changes what the call does, or that
the call refuses it with one line.  A keyword without a probe fails :func:`test_every_documented_keyword_has_a_probe`,
so a new one cannot slip in unexamined.  Real data: slices of SQuAD v1.1 dev and SciFact, the shared MiniLM reader.
"""

from __future__ import annotations

import inspect
import json
from functools import cached_property
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from tests.conftest import DATA, READER

# ------------------------------------------------------------------ what is documented
# the documented keys of each function's ** parameter (where they are not read off a signature or a config class)
RETRIEVER_KINDS = ("bm25", "dense", "fusion", "rerank")  # make_retriever's docstring: per kind, a plugin's name too


def documented_keywords() -> set[str]:
    """``function.keyword`` for every parameter of every function in ``api.__all__``, a ``**`` parameter expanded
    into its documented keys (``**`` itself when the keys are open-ended: field paths, a plugin's kind)."""
    from eval.bertscore import BERT_F1
    from data.registry import load_dataset as registry_load
    from pipeline import api
    from pipeline.config import ReaderConfig

    expand = {
        "load_dataset": [p.name for p in inspect.signature(registry_load).parameters.values()
                         if p.kind is inspect.Parameter.KEYWORD_ONLY],
        "make_reader": [name for name in ReaderConfig.model_fields if name != "model"],
        "answer_metrics": list(BERT_F1.options),
        "make_retriever": [*RETRIEVER_KINDS, "**"],
        "run": ["**"], "sweep": ["**"], "load_config": ["**"],
    }
    out = set()
    for name in api.__all__:
        obj = getattr(api, name)
        if not inspect.isfunction(obj):
            continue  # the config and result classes
        for p in inspect.signature(obj).parameters.values():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                assert name in expand, f"api.{name}(**{p.name}): say which keys it documents"
                out.update(f"{name}.{key}" for key in expand[name])
            else:
                out.add(f"{name}.{p.name}")
    return out


def one_line(call, *needles, errors=(UserError, TypeError)) -> str:
    """``call()`` is refused with one line holding every needle."""
    with pytest.raises(errors) as err:
        call()
    message = str(err.value)
    assert message and "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


class Slices:
    """The data, rankings and readers the probes share (built on first use, once per module)."""

    @cached_property
    def api(self):
        from pipeline import api

        return api

    @cached_property
    def ds(self):
        return self.api.load_dataset("reqa_squad", "dev", limit=12)

    @cached_property
    def ranking(self):
        return self.api.retrieve("bm25", self.ds, depth=10)

    @cached_property
    def half(self):
        """The first 6 questions of :attr:`ds` and their rows of :attr:`ranking`."""
        from data.types import Ranking

        ds = self.api.load_dataset("reqa_squad", "dev", limit=6)
        rows = len(ds.queries)
        return ds, Ranking(self.ranking.ids[:rows], self.ranking.scores[:rows])

    @cached_property
    def fit(self):
        """A training slice and its ranking for fitting the ordinal selector (dev questions after the evaluated ones)."""
        from data.types import Queries

        ds = self.api.load_dataset("reqa_squad", "dev", limit=80)
        return ds, self.api.retrieve("bm25", ds, depth=25)

    @cached_property
    def other_ranking(self):
        """:attr:`ds` ranked by another BM25 (k1 0.1, b 0)."""
        return self.api.retrieve(self.api.make_retriever("bm25", bm25={"k1": 0.1, "b": 0.0}), self.ds, depth=10)

    @cached_property
    def reader(self):
        return self.api.make_reader(READER, threads=1)

    def answers(self, reader=None, **kwargs):
        return self.api.read(reader or self.reader, self.ds, self.ranking, **kwargs)


@pytest.fixture(scope="module")
def s():
    return Slices()


def differs(a, b):
    assert a != b, a


def fitted(s, selector="ordinal:25", **kwargs):
    train, ranking = kwargs.pop("train", None) or s.fit
    sel = s.api.fit_selector(s.api.make_selector(selector), train, kwargs.pop("ranking", ranking), **kwargs)
    return json.dumps(sel.to_dict(), sort_keys=True, default=str)


def questions(ds) -> int:
    return len(dict.fromkeys(ds.queries.question_keys))


# ------------------------------------------------------------------ the probes
def _bad_squad(tmp: Path) -> Path:
    """xquad.en.json with one answer whose answer_start points elsewhere."""
    squad = json.loads((DATA / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    squad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 3
    path = tmp / "bad.json"
    path.write_text(json.dumps(squad), encoding="utf-8")
    return path


def _captured_bert_f1_options(s, monkeypatch, key, value) -> dict:
    """The options api.answer_metrics hands to the metrics for bert_f1 (the metric itself stubbed out)."""
    import eval.answer_metrics

    seen = {}

    def stub(predictions, references, *, language, metrics, options):
        seen.update(options["bert_f1"])
        return {m: np.zeros(len(predictions)) for m in metrics}

    monkeypatch.setattr(eval.answer_metrics, "answer_metrics", stub)
    s.api.answer_metrics(_gold(s.ds), s.ds, metrics=("em", "bert_f1"), **{key: value})
    return seen


def bertscore_probe(key, value):
    def probe(s, tmp_path, monkeypatch):
        one_line(lambda: s.api.answer_metrics(_gold(s.ds), s.ds, metrics=("em", "f1"), **{key: value}), key, "bert_f1")
        assert _captured_bert_f1_options(s, monkeypatch, key, value)[key] == value
    return probe


def reader_setting_probe(key, value, attribute=None, fact=None):
    """A setting that shapes the reader: it reaches the reader (its attribute, or what its manifest facts say)."""
    def probe(s, tmp_path, monkeypatch):
        from pipeline import api

        reader = api.make_reader(READER, threads=1, **{key: value})
        if attribute:
            assert getattr(reader, attribute) == value and getattr(s.reader, attribute) != value
        if fact:
            assert reader.facts()[fact] != s.reader.facts()[fact]
        one_line(lambda: api.make_reader(READER, **{key: "not-a-value"}), key)
    return probe


def _sweep_config(s, monkeypatch, *args, **overrides):
    import pipeline.tradeoff_sweep

    seen = []
    monkeypatch.setattr(pipeline.tradeoff_sweep, "run_sweep_experiment", lambda config: seen.append(config) or config)
    s.api.sweep(*args, **overrides)
    return seen[0]


def _run_config(tmp_path, **data):
    return {"data": {"dataset": "reqa_squad", "limit": 4, **data}, "retriever": {"spec": "bm25", "depth": 20},
            "out": str(tmp_path / f"run-{len(list(tmp_path.iterdir()))}")}


PROBES = {
    # load_dataset
    "load_dataset.name": lambda s, t, m: differs(s.api.load_dataset("reqa_squad", limit=3).name,
                                                 s.api.load_dataset("squad_open", limit=3).name),
    "load_dataset.split": lambda s, t, m: differs(s.api.load_dataset("beir:scifact", "test", limit=3).queries.ids,
                                                  s.api.load_dataset("beir:scifact", "train", limit=3).queries.ids),
    "load_dataset.limit": lambda s, t, m: differs(questions(s.api.load_dataset("reqa_squad", limit=3)),
                                                  questions(s.api.load_dataset("reqa_squad", limit=5))),
    "load_dataset.data_dir": lambda s, t, m: one_line(lambda: s.api.load_dataset("reqa_squad", data_dir=t, limit=3),
                                                      str(t)),
    "load_dataset.data_file": lambda s, t, m: differs(
        len(s.api.load_dataset("reqa_squad", data_file=DATA / "xquad" / "xquad.en.json").corpus), len(s.ds.corpus)),
    "load_dataset.skip_bad_records": lambda s, t, m: (
        one_line(lambda: s.api.load_dataset(f"squad_file:{_bad_squad(t)}"), "bad.json"),
        s.api.load_dataset(f"squad_file:{_bad_squad(t)}", skip_bad_records=True)),
    "load_dataset.answer_match": lambda s, t, m: one_line(lambda: s.api.load_dataset("reqa_squad", answer_match="regex"),
                                                          "--answer-match"),
    "load_dataset.language": lambda s, t, m: one_line(lambda: s.api.load_dataset("reqa_squad", language="th"),
                                                      "--language th"),
    # make_retriever
    "make_retriever.spec": lambda s, t, m: differs(type(s.api.make_retriever("bm25")), type(s.api.make_retriever("dense"))),
    "make_retriever.options": lambda s, t, m: (
        differs(s.api.make_retriever("bm25", options={"bm25": {"k1": 2.0}}).k1, s.api.make_retriever("bm25").k1),
        one_line(lambda: s.api.make_retriever("bm25", options={"dense": {"model": "x"}}), "dense")),
    "make_retriever.bm25": lambda s, t, m: (
        differs(s.api.make_retriever("bm25", bm25={"k1": 2.0}).k1, s.api.make_retriever("bm25").k1),
        one_line(lambda: s.api.make_retriever("dense", bm25={"k1": 2.0}), "bm25")),
    "make_retriever.dense": lambda s, t, m: (
        differs(s.api.make_retriever("dense", dense={"model": "minilm-other"}).model, s.api.make_retriever("dense").model),
        one_line(lambda: s.api.make_retriever("bm25", dense={"model": "x"}), "dense")),
    "make_retriever.fusion": lambda s, t, m: (
        differs(s.api.make_retriever("rrf:bm25+dense", fusion={"rank_constant": "10"}).rank_constant,
                s.api.make_retriever("rrf:bm25+dense").rank_constant),
        one_line(lambda: s.api.make_retriever("bm25", fusion={"rank_constant": "10"}), "fusion")),
    "make_retriever.rerank": lambda s, t, m: (
        differs(type(s.api.make_retriever("bm25", rerank={"spec": "models/ce", "depth": 4})).__name__,
                type(s.api.make_retriever("bm25")).__name__),
        one_line(lambda: s.api.make_retriever("bm25", rerank={"depth": 4}), "without a spec")),
    "make_retriever.**": lambda s, t, m: one_line(lambda: s.api.make_retriever("bm25", bm52={"k1": 1}), "bm52"),
    # retrieve
    "retrieve.retriever": lambda s, t, m: differs(s.other_ranking.ids.tolist(), s.ranking.ids.tolist()),
    "retrieve.dataset": lambda s, t, m: differs(len(s.api.retrieve("bm25", s.half[0], depth=10)), len(s.ranking)),
    "retrieve.depth": lambda s, t, m: differs(s.api.retrieve("bm25", s.ds, depth=3).depth, s.ranking.depth),
    "retrieve.train": lambda s, t, m: one_line(lambda: s.api.retrieve("bm25", s.ds, depth=3, train=s.ds), "train",
                                               "not learned"),
    # retrieval_metrics
    "retrieval_metrics.ranking": lambda s, t, m: differs(
        s.api.retrieval_metrics(s.ranking, s.ds)["reqa"]["sentence"],
        s.api.retrieval_metrics(s.ranking.top(1), s.ds)["reqa"]["sentence"]),
    "retrieval_metrics.dataset": lambda s, t, m: (
        differs(s.api.retrieval_metrics(s.half[1], s.half[0])["reqa"]["questions"],
                s.api.retrieval_metrics(s.ranking, s.ds)["reqa"]["questions"]),
        differs(questions(s.half[0]), questions(s.ds))),
    # make_selector
    "make_selector.spec": lambda s, t, m: differs(s.api.make_selector("top:3").n, s.api.make_selector("top:5").n),
    # fit_selector
    "fit_selector.selector": lambda s, t, m: (
        one_line(lambda: fitted(s, "top:3"), "not learned"), differs(fitted(s, "ordinal:25"), fitted(s, "ordinal:10"))),
    "fit_selector.train": lambda s, t, m: differs(
        fitted(s), fitted(s, train=(s.ds, s.api.retrieve("bm25", s.ds, depth=25)))),
    "fit_selector.ranking": lambda s, t, m: differs(
        fitted(s), fitted(s, ranking=s.api.retrieve(s.api.make_retriever("bm25", bm25={"k1": 0.1, "b": 0.0}), s.fit[0], depth=25))),
    "fit_selector.depth": lambda s, t, m: differs(fitted(s), fitted(s, depth=10)),
    "fit_selector.unit": lambda s, t, m: differs(fitted(s), fitted(s, unit="paragraph")),
    "fit_selector.reader": lambda s, t, m: one_line(lambda: fitted(s, reader=object()), "reader", "does not read"),
    "fit_selector.mu": lambda s, t, m: one_line(lambda: fitted(s, mu=0.5), "mu", "does not read"),
    "fit_selector.cache_dir": lambda s, t, m: one_line(lambda: fitted(s, cache_dir=t), "cache_dir", "does not read"),
    # select
    "select.selector": lambda s, t, m: differs(s.api.select(s.api.make_selector("top:1"), s.ranking, s.ds).tolist(),
                                               s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds).tolist()),
    "select.ranking": lambda s, t, m: differs(s.api.select(s.api.make_selector("top:3"), s.ranking.top(1), s.ds).tolist(),
                                              s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds).tolist()),
    "select.dataset": lambda s, t, m: differs(len(s.api.select(s.api.make_selector("top:3"), s.half[1], s.half[0])),
                                              len(s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds))),
    "select.unit": lambda s, t, m: differs(
        s.api.select(s.api.make_selector("top:10"), s.ranking, s.ds, unit="paragraph").tolist(),
        s.api.select(s.api.make_selector("top:10"), s.ranking, s.ds).tolist()),
    "select.reader": lambda s, t, m: one_line(lambda: s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds,
                                                                   reader=s.reader), "reader", "does not read"),
    "select.mu": lambda s, t, m: one_line(lambda: s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds, mu=0.0),
                                          "mu", "does not read"),
    "select.cache_dir": lambda s, t, m: one_line(lambda: s.api.select(s.api.make_selector("top:3"), s.ranking, s.ds,
                                                                      cache_dir=t), "cache_dir", "does not read"),
    # make_reader
    "make_reader.model": lambda s, t, m: one_line(lambda: s.api.make_reader(DATA), str(DATA)),
    "make_reader.device": lambda s, t, m: one_line(lambda: s.api.make_reader(READER, device="tpu"), "tpu"),
    "make_reader.threads": lambda s, t, m: (
        differs(s.api.make_reader(READER, threads=2).num_threads, s.reader.num_threads),
        one_line(lambda: s.api.make_reader(READER, threads=0), "threads 0")),
    "make_reader.max_length": reader_setting_probe("max_length", 256, attribute="max_length"),
    "make_reader.stride": reader_setting_probe("stride", 16, attribute="stride"),
    "make_reader.options": lambda s, t, m: (
        differs(s.api.make_reader(READER, options={"max_length": 256}).max_length, s.api.make_reader(READER).max_length),
        one_line(lambda: s.api.make_reader(READER, options={"bogus": 1}), "bogus")),
    "make_reader.max_answer_tokens": reader_setting_probe("max_answer_tokens", 2, attribute="max_answer_tokens"),
    "make_reader.batch_size": reader_setting_probe("batch_size", 3, fact="reader_batch_size"),
    "make_reader.token_budget": reader_setting_probe("token_budget", 500, fact="reader_max_batch_tokens"),
    "make_reader.dtype": lambda s, t, m: reader_setting_probe(
        "dtype", "float32" if s.reader.facts()["reader_dtype"] != "float32" else "bfloat16", fact="reader_dtype")(s, t, m),
    "make_reader.backend": reader_setting_probe("backend", "openvino", attribute="backend", fact="reader_backend"),
    "make_reader.read_unit": lambda s, t, m: (
        differs(s.answers(s.api.make_reader(READER, threads=1, read_unit="paragraph"), n=1), s.answers(n=1)),
        one_line(lambda: s.api.make_reader(READER, read_unit="page"), "read_unit")),
    "make_reader.mu": lambda s, t, m: (
        differs(s.answers(s.api.make_reader(READER, threads=1, mu=0.0), n=5), s.answers(n=5)),
        one_line(lambda: s.api.make_reader(READER, mu=2.0), "mu")),
    "make_reader.read_cache": lambda s, t, m: (
        s.answers(s.api.make_reader(READER, threads=1, read_cache=str(t / "reads")), n=1),
        differs(sorted((t / "reads").iterdir()) if (t / "reads").is_dir() else [], [])),
    # read
    "read.reader": lambda s, t, m: differs(s.answers(s.api.make_reader(READER, threads=1, max_answer_tokens=1), n=1),
                                           s.answers(n=1)),
    "read.dataset": lambda s, t, m: differs(len(s.api.read(s.reader, s.half[0], s.half[1], n=1)), len(s.answers(n=1))),
    "read.ranking": lambda s, t, m: differs(s.api.read(s.reader, s.ds, _reversed(s.ranking), n=1), s.answers(n=1)),
    "read.n": lambda s, t, m: differs(s.answers(n=1), s.answers(n=5)),
    "read.unit": lambda s, t, m: differs(s.answers(n=1, unit="paragraph"), s.answers(n=1)),
    "read.mu": lambda s, t, m: differs(s.answers(n=5, mu=0.0), s.answers(n=5)),
    "read.cache_dir": lambda s, t, m: (s.answers(n=1, cache_dir=t / "reads"), differs(list((t / "reads").iterdir()), [])),
    # answer_metrics
    "answer_metrics.predictions": lambda s, t, m: differs(
        s.api.answer_metrics({q: a[0] for q, a in zip(s.ds.queries.question_ids, s.ds.queries.answers)}, s.ds, ("em",)),
        s.api.answer_metrics({q: "" for q in s.ds.queries.question_ids}, s.ds, ("em",))),
    "answer_metrics.dataset": lambda s, t, m: (
        differs(s.api.answer_metrics(_gold(s.ds), s.ds, ("em",)), s.api.answer_metrics(_gold(s.ds), _other_gold(s.ds), ("em",))),
        one_line(lambda: s.api.answer_metrics(_gold(s.ds), s.api.load_dataset("beir:scifact", "test", limit=2), ("em",)),
                 "none of the")),
    "answer_metrics.metrics": lambda s, t, m: differs(set(s.api.answer_metrics(_gold(s.ds), s.ds, ("em",))),
                                                      set(s.api.answer_metrics(_gold(s.ds), s.ds, ("em", "f1")))),
    # run, sweep, load_config
    "run.config": lambda s, t, m: differs(s.api.run(_run_config(t, limit=3)).metrics["retrieval"]["reqa"]["questions"],
                                          s.api.run(_run_config(t, limit=5)).metrics["retrieval"]["reqa"]["questions"]),
    "run.**": lambda s, t, m: (
        differs(s.api.run(_run_config(t), **{"retriever.depth": 7}).metrics["retrieval"]["reqa"]["depth"], 20),
        one_line(lambda: s.api.run(_run_config(t), **{"retriever.deepth": 7}), "deepth")),
    "sweep.config": lambda s, t, m: differs(_sweep_config(s, m, {"data": {"limit": 3}}).data.limit,
                                            _sweep_config(s, m, {"data": {"limit": 4}}).data.limit),
    "sweep.**": lambda s, t, m: (
        differs(_sweep_config(s, m, {"data": {"limit": 3}}, **{"selectors.n": "1-4"}).selectors.n, "1-20"),
        one_line(lambda: _sweep_config(s, m, {}, **{"selectors.m": "1"}), "selectors.m")),
    "load_config.model_cls": lambda s, t, m: differs(
        type(s.api.load_config(s.api.RunConfig, _yaml(t, "a.yaml", "retriever: {depth: 5}\n"))),
        type(s.api.load_config(s.api.SweepConfig, _yaml(t, "a.yaml", "retriever: {depth: 5}\n")))),
    "load_config.path": lambda s, t, m: differs(
        s.api.load_config(s.api.RunConfig, _yaml(t, "a.yaml", "retriever: {depth: 5}\n")).retriever.depth,
        s.api.load_config(s.api.RunConfig, _yaml(t, "b.yaml", "retriever: {depth: 6}\n")).retriever.depth),
    "load_config.**": lambda s, t, m: (
        differs(s.api.load_config(s.api.RunConfig, _yaml(t, "a.yaml", "retriever: {depth: 5}\n"),
                                  **{"retriever.depth": 9}).retriever.depth, 5),
        one_line(lambda: s.api.load_config(s.api.RunConfig, _yaml(t, "a.yaml", "{}\n"), **{"retriever.deepth": 9}),
                 "deepth")),
}
BERTSCORE_VALUES = {"model": "some/model", "num_layers": 4, "batch_size": 8, "device": "cpu", "progress": True,
                    "rescale": True, "language": "th", "fallback": False, "cache": False}


def _reversed(ranking):
    """Each query's hits read from the last (its 10th) up."""
    from data.types import Ranking

    return Ranking(ranking.ids[:, ::-1].copy(), ranking.scores)


def _gold(ds) -> dict[str, str]:
    """Each question's first gold answer, as predictions."""
    return {q: a[0] for q, a in zip(ds.queries.question_ids, ds.queries.answers)}


def _other_gold(ds):
    """A copy of ``ds`` whose gold answers are all another text."""
    import copy

    other = copy.deepcopy(ds)
    other.queries.answers = [["an answer no one gave"] for _ in other.queries.answers]
    return other


def _yaml(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path


def all_probes() -> dict:
    from eval.bertscore import BERT_F1

    probes = dict(PROBES)
    for key in BERT_F1.options:
        probes[f"answer_metrics.{key}"] = bertscore_probe(key, BERTSCORE_VALUES.get(key, "x"))
    return probes


# ------------------------------------------------------------------ the tests
def test_every_documented_keyword_has_a_probe():
    assert set(all_probes()) == documented_keywords()


def test_the_api_defaults_are_the_commands():
    """One source: the API's defaults are read off the config classes python -m pipeline.run builds from its flags."""
    from pipeline import api
    from pipeline.config import RunConfig
    from selection import parse_selector

    run = RunConfig()
    defaults = {f"{name}.{p.name}": p.default for name in api.__all__ if inspect.isfunction(getattr(api, name))
                for p in inspect.signature(getattr(api, name)).parameters.values()
                if p.default is not inspect.Parameter.empty}
    assert defaults["retrieve.depth"] == run.retriever.depth == 1000  # it was 100 while the command's was 1000
    assert defaults["load_dataset.split"] == run.data.split
    assert defaults["make_retriever.spec"] == run.retriever.spec
    assert defaults["make_selector.spec"] == run.selector
    assert defaults["read.n"] == parse_selector(run.selector).n
    assert defaults["make_reader.device"] == run.device
    assert list(defaults["answer_metrics.metrics"]) == run.metrics.answer
    # unit, mu and cache_dir left out mean make_reader's settings, else the run's reader defaults
    reader = type("R", (), {})()
    assert api._reading_settings(reader, None, None, None) == (run.reader.read_unit, run.reader.mu, run.reader.read_cache)


@pytest.mark.slow
@pytest.mark.parametrize("keyword", sorted(PROBES) + [f"answer_metrics.{k}" for k in BERTSCORE_VALUES])
def test_a_documented_keyword_has_an_effect_or_is_refused_in_one_line(keyword, s, tmp_path, monkeypatch):
    probes = all_probes()
    if keyword not in probes:
        pytest.skip(f"{keyword} is no longer documented")
    probes[keyword](s, tmp_path, monkeypatch)
