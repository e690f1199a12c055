"""The typed configuration: one name per setting, errors that name flag or file and field path, fingerprints."""

from __future__ import annotations

import pytest

from data.errors import UserError
from data.plugins import parameters
from pipeline.config import BM25Config, DenseConfig, RunConfig, SweepConfig, flag_table, load_config


def test_retriever_settings_are_the_retrievers_own_parameters():
    """A setting has one name: the config records use the constructors' parameter names (only the flags differ)."""
    from retrievers.bm25 import BM25Retriever
    from retrievers.dense import DenseRetriever

    assert set(BM25Config.model_fields) <= set(parameters(BM25Retriever))
    assert set(DenseConfig.model_fields) <= set(parameters(DenseRetriever))


def test_every_flag_maps_to_one_field_and_both_commands_share_their_names():
    run, sweep = flag_table(RunConfig), flag_table(SweepConfig)
    assert len(set(run.values())) == len(run) and len(set(sweep.values())) == len(sweep)
    for flag in set(run) & set(sweep):
        if flag != "selector":  # a run's selector; a sweep's extra selectors
            assert run[flag] == sweep[flag], flag


@pytest.mark.parametrize("text, needles", [
    ("retriever: {bm25: {k1: fast}}\n", ["bad.yaml", "retriever.bm25.k1", "'fast'", "number"]),
    ("reader: {max_length: 4}\n", ["bad.yaml", "reader.max_length", "must be >= 8"]),
    ("selector: best:3\n", ["bad.yaml", "selector", "unknown method 'best'"]),
    ("metrics: {answer: [em, bleu]}\n", ["bad.yaml", "metrics.answer", "unknown answer metric 'bleu'"]),
    ("retriever: {bm25: {k2: 1}}\n", ["bad.yaml", "retriever.bm25.k2", "unknown setting"]),
])
def test_a_bad_value_in_a_config_file_is_one_line_naming_file_and_field(tmp_path, text, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_config(RunConfig, path)
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in needles), message


def test_flag_names_in_files_and_overrides_give_the_same_config(tmp_path):
    nested, flat = tmp_path / "nested.yaml", tmp_path / "flat.toml"
    nested.write_text("retriever: {spec: 'rrf:bm25+dense', bm25: {k1: 1.2}}\nreader: {model: bert-base}\nselector: ordinal:10\n")
    flat.write_text('retriever = "rrf:bm25+dense"\nbm25-k1 = 1.2\nreader = "bert-base"\nselector = "ordinal:10"\n')
    a, b = load_config(RunConfig, nested), load_config(RunConfig, flat)
    assert a == b and a.retriever.bm25.k1 == 1.2 and a.reader.model == "bert-base"
    assert load_config(RunConfig, nested, **{"retriever.depth": 50}).retriever.depth == 50


def test_fingerprint_follows_results_not_places_or_batches():
    base = RunConfig()
    assert base.fingerprint() == RunConfig(out="elsewhere", threads=1, reader={"batch_size": 8}).fingerprint()
    assert base.fingerprint() != RunConfig(retriever={"bm25": {"k1": 1.2}}).fingerprint()
    assert base.fingerprint() != RunConfig(reader={"max_answer_tokens": 20}).fingerprint()
    sweep = SweepConfig()
    same_levels = SweepConfig(data={"corpus_sizes": "x1,all", "seeds": "3"}, selectors={"n": "5-20"})
    keep = ("data", "retriever", "reader", "selectors")
    leave = ("data.corpus_sizes", "data.seeds", "selectors.n")
    assert sweep.fingerprint(*keep, leave_out=leave) == same_levels.fingerprint(*keep, leave_out=leave)
    assert sweep.fingerprint(*keep, leave_out=leave) != SweepConfig(selectors={"thetas": "0.7"}).fingerprint(*keep, leave_out=leave)


def test_yaml_numbers_for_text_settings_read_as_on_the_command_line(tmp_path):
    nested, flat = tmp_path / "nested.yaml", tmp_path / "flat.yaml"
    nested.write_text("data: {dataset: squad_open, seeds: 3, corpus_sizes: 5000}\nselectors: {n: 20}\n")
    flat.write_text("dataset: squad_open\nseeds: 3\ncorpus-sizes: 5000\nn: 20\n")
    for path in (nested, flat):
        config = load_config(SweepConfig, path)
        assert (config.data.seeds, config.data.corpus_sizes, config.selectors.n) == ("3", "5000", "20")
