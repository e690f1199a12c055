"""The dataset registry (data.registry.DATASETS), the one data-dir lookup (data.locations) and a plugin loader.

Real data from ``QA_DATA_DIR`` (../shared/data), real entry points (tests/qa_plugin's .dist-info), no mocks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from data.registry import DATASETS, argument_rule, dataset_forms, dataset_names, load_dataset, resolve

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ["QA_DATA_DIR"])
BUILTINS = ["reqa_squad", "squad_file", "squad_open", "reqa_nq", "beir", "mteb", "iapp_wiki_qa_squad", "open"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def plugin_on_path(plugin_package):
    """tests/qa_plugin on sys.path, as if ``pip install``-ed; the registry forgets it afterwards."""
    plugin_package(DATASETS)


def test_registry_lists_the_builtins():
    assert set(BUILTINS) <= set(DATASETS.builtin_names())
    assert set(BUILTINS) <= set(dataset_names()) and dataset_names() == sorted(dataset_names())
    forms = dataset_forms()
    for form in ("reqa_squad", "squad_file:NAME", "squad_open[:NAME]", "reqa_nq", "beir:NAME", "mteb:NAME",
                 "iapp_wiki_qa_squad", "open:NAME"):
        assert form in forms


def test_builtin_names_take_arguments_as_before():
    from data.beir import load_beir
    from data.open_domain import load_squad_open

    assert resolve("squad_open") == (load_squad_open, None)
    assert resolve("squad_open:") == (load_squad_open, None)
    assert resolve("squad_open:own") == (load_squad_open, "own")
    assert resolve("beir:scifact") == (load_beir, "scifact")
    assert resolve("squad_file:a:b.json")[1] == "a:b.json"  # only the first colon separates the argument
    for name, why in [("beir", "beir needs an argument, as in beir:NAME"), ("beir:", "beir needs an argument"),
                      ("squad_file", "needs an argument"), ("open", "needs an argument"),
                      ("reqa_squad:x", "reqa_squad takes no argument"), ("reqa_nq:dev", "takes no argument"),
                      ("iapp_wiki_qa_squad:th", "takes no argument")]:
        with pytest.raises(UserError) as err:
            load_dataset(name, "dev")
        assert str(err.value).startswith(f"unknown dataset {name!r}") and why in str(err.value), str(err.value)


def test_argument_rule_of_other_loaders_comes_from_their_signature():
    def none(split, *, data_dir, data_file, skip_bad_records=False): ...

    def optional(split, *, data_dir, data_file, arg=None, skip_bad_records=False): ...

    def required(split, *, data_dir, data_file, arg, skip_bad_records=False): ...

    assert [argument_rule("x", f) for f in (none, optional, required)] == ["none", "optional", "required"]
    assert argument_rule("reqa_squad", optional) == "none"  # a built-in keeps its declared rule


def test_unknown_names_are_one_line_errors_listing_the_known_ones():
    with pytest.raises(UserError) as err:
        load_dataset("no_such_set", "dev")
    message = str(err.value)
    assert "\n" not in message and message.startswith("unknown dataset 'no_such_set' (known: ")
    known = message.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == dataset_forms() and "reqa_squad" in known and "beir:NAME" in known
    with pytest.raises(UserError, match=r"^unknown dataset 'nope' \(known: .*reqa_squad") as err:
        DATASETS.get("nope")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match=r"--language 'fr': use auto, en, th"):
        load_dataset("reqa_squad", "dev", language="fr")


def test_the_one_data_dir_lookup_honours_qa_data_dir_and_an_explicit_dir(tmp_path, monkeypatch):
    from data import beir, locations, nq, thai
    from data.squad import squad_dict

    monkeypatch.setenv("QA_DATA_DIR", str(DATA))
    assert locations.data_dir() == DATA and locations.data_dir(None) == DATA
    assert locations.data_dir(tmp_path) == tmp_path and locations.data_dir(str(tmp_path)) == tmp_path
    assert locations.shown_dir() == DATA
    # every loader's local lookup goes through it: found under $QA_DATA_DIR...
    assert squad_dict("dev", data_dir=None, data_file=None)[0] == DATA / "squad" / "dev-v1.1.json.zip"
    assert beir._local_dir("scifact", None, None) == DATA / "scifact"
    assert thai._local_iapp(None, None) == DATA / "iapp_wiki_qa_squad" / "data.zip"
    # ...and an explicit dir wins over it
    assert squad_dict("dev", data_dir=tmp_path, data_file=None) == (None, None)
    assert beir._local_dir("scifact", tmp_path, None) is None
    assert thai._local_iapp(tmp_path, None) is None
    assert nq._local_nq("dev", tmp_path) is None
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev-v1.1.json.zip").write_bytes((DATA / "squad" / "dev-v1.1.json.zip").read_bytes())
    monkeypatch.setenv("QA_DATA_DIR", str(tmp_path))
    assert squad_dict("dev", data_dir=None, data_file=None)[0] == tmp_path / "squad" / "dev-v1.1.json.zip"
    assert beir._local_dir("scifact", None, None) is None
    assert beir._local_dir("scifact", DATA, None) == DATA / "scifact"
    # (with no ../shared/data beside the checkout or the current directory either)
    monkeypatch.setattr(locations, "default_dirs", lambda: [tmp_path / "none-here", tmp_path / "nor-here"])
    for unset in ("", None):  # unset or empty: no data dir, and messages name the variable
        if unset is None:
            monkeypatch.delenv("QA_DATA_DIR")
        else:
            monkeypatch.setenv("QA_DATA_DIR", unset)
        assert locations.data_dir() is None and locations.shown_dir() == Path("$QA_DATA_DIR")
        assert locations.find_local(None, ["squad/dev-v1.1.json.zip"]) is None
        assert locations.find_local(DATA, ["nope.json", "squad/dev-v1.1.json.zip"]) == DATA / "squad" / "dev-v1.1.json.zip"


def test_data_dir_search_order(tmp_path, monkeypatch):
    """--data-dir, else $QA_DATA_DIR, else ../shared/data beside the checkout, else ../shared/data from the current
    directory: the first that is given (1., 2.) or exists (3., 4.)."""
    from data import locations

    beside_checkout, beside_cwd = tmp_path / "checkout-data", tmp_path / "cwd-data"
    monkeypatch.setattr(locations, "default_dirs", lambda: [beside_checkout, beside_cwd])
    monkeypatch.setenv("QA_DATA_DIR", str(tmp_path / "env"))
    assert locations.data_dir(tmp_path / "explicit") == tmp_path / "explicit"  # given, even when it does not exist
    assert locations.data_dir() == tmp_path / "env"
    monkeypatch.delenv("QA_DATA_DIR")
    assert locations.data_dir() is None  # neither default exists
    beside_cwd.mkdir()
    assert locations.data_dir() == beside_cwd
    beside_checkout.mkdir()
    assert locations.data_dir() == beside_checkout
    monkeypatch.undo()
    # the real defaults: <checkout>/../shared/data, then ./../shared/data
    monkeypatch.chdir(tmp_path)
    assert locations.default_dirs() == [(ROOT / ".." / "shared" / "data").resolve(), (tmp_path / ".." / "shared" / "data").resolve()]
    assert "--data-dir, else $QA_DATA_DIR" in locations.SEARCH_ORDER


def test_no_other_data_module_reads_qa_data_dir():
    pattern = re.compile(r"environ(\.get\(|\[)\s*['\"]QA_DATA_DIR")
    readers = [p.name for p in sorted((ROOT / "data").glob("*.py")) if pattern.search(p.read_text(encoding="utf-8"))]
    assert readers == []
    assert "os.environ.get(ENV)" in (ROOT / "data" / "locations.py").read_text(encoding="utf-8")


def _check_reqa(ds, squad_path: Path, articles: int):
    """A ReQA dataset of the first ``articles`` articles of the SQuAD file: real corpus, queries and gold."""
    from data.squad import load_squad_json

    squad = load_squad_json(squad_path)["data"][:articles]
    contexts = {p["context"] for a in squad for p in a["paragraphs"] if p["qas"]}
    questions = {qa["id"]: qa for a in squad for p in a["paragraphs"] for qa in p["qas"]}
    assert set(ds.corpus.paragraph_texts) == contexts
    assert set(ds.queries.question_ids) == set(questions)
    assert len(ds.corpus) == len(ds.corpus.texts) > len(contexts)  # sentences, several per paragraph
    assert len(ds.queries) >= len(questions)  # one input per question and distinct answer sentence
    for i in range(len(ds.queries)):
        qa = questions[ds.queries.question_ids[i]]
        assert ds.queries.texts[i] == qa["question"]
        gold = np.asarray(ds.queries.gold[i])
        assert gold.size > 0
        sentence = ds.queries.answer_sentences[i]
        assert all(ds.corpus.texts[g] == sentence for g in gold)
        # the gold sentence holds one of the question's answers, in a paragraph that has it
        assert any(a["text"] in ds.corpus.contexts[g] for a in qa["answers"] for g in gold)


def test_plugin_dataset_loads_through_load_dataset(plugin_on_path, private_cache):
    assert "tiny_squad" in dataset_names() and "tiny_squad" not in DATASETS.builtin_names()
    dev = load_dataset("tiny_squad", "dev")
    assert (dev.name, dev.split, dev.level, dev.corpus.language) == ("tiny_squad:3", "dev", "sentence", "en")
    assert dev.sources["articles"] == 3 and str(DATA / "squad" / "dev-v1.1.json.zip") in dev.sources
    _check_reqa(dev, DATA / "squad" / "dev-v1.1.json.zip", 3)

    train = load_dataset("tiny_squad:2", "train")
    assert (train.name, train.split) == ("tiny_squad:2", "train") and train.sources["articles"] == 2
    train_file = DATA / "squad" / "train-v1.1.reconstructed.json.gz"
    assert str(train_file) in train.sources
    _check_reqa(train, train_file, 2)
    assert not set(train.queries.question_ids) & set(dev.queries.question_ids)

    # built once, then served from the (private) cache
    assert len(list((private_cache / "datasets").glob("*.pkl"))) == 2
    again = load_dataset("tiny_squad", "validation")
    assert again.queries.ids == dev.queries.ids and list(again.corpus.texts) == list(dev.corpus.texts)
    assert len(list((private_cache / "datasets").glob("*.pkl"))) == 2


def test_plugin_dataset_errors_are_one_line(plugin_on_path, tmp_path):
    for name, split, expected in [("tiny_squad:0", "dev", "a positive integer"),
                                  ("tiny_squad:many", "dev", "a positive integer"),
                                  ("tiny_squad", "test", "SQuAD has no split 'test'")]:
        with pytest.raises(UserError, match=expected) as err:
            load_dataset(name, split)
        assert "\n" not in str(err.value)
    # an explicit data dir wins over QA_DATA_DIR: nothing there, hub off -> the message names the file to put where
    with pytest.raises(UserError, match=r"squad/dev-v1\.1\.json .*under " + re.escape(str(tmp_path))):
        load_dataset("tiny_squad", "dev", data_dir=tmp_path)
