"""Dense retrieval at scale: memory-mapped shards, FAISS factory indexes and their cache, prebuilt Pyserini-layout dirs.

Real MiniLM embeddings (the default encoder) of the first 640 ReQA SQuAD dev
sentences and the questions answered in them; real FAISS; Pyserini's own
``FaissSearcher`` as the reference for the prebuilt-directory layout.
"""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

from data.errors import UserError

N_ROWS = 640
SHARD = 100  # several shards, and not a multiple of FAISS's 1024-row blocks


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    old = os.environ.get("QA_CACHE_DIR")
    path = tmp_path_factory.mktemp("cache")
    os.environ["QA_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("QA_CACHE_DIR", None)
    else:
        os.environ["QA_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def slice_(reqa_dev, cache):
    """(corpus of the first N_ROWS sentences, their question texts, the questions' gold rows)."""
    corpus = reqa_dev.corpus.subset(np.arange(N_ROWS))
    qs = [(t, g) for t, g in zip(reqa_dev.queries.texts, reqa_dev.queries.gold) if len(g) and max(g) < N_ROWS]
    assert len(qs) >= 100
    return corpus, [t for t, _ in qs[:200]], [np.asarray(g) for _, g in qs[:200]]


def dense(**kw):
    from retrievers.dense import DenseRetriever

    kw.setdefault("shard_texts", SHARD)
    kw.setdefault("device", "cpu")
    return DenseRetriever(**kw)


@pytest.fixture(scope="module")
def flat(slice_):
    """The exact retriever over the slice (its embeddings are cached for every other test) and its top 50."""
    corpus, queries, _ = slice_
    r = dense().index(corpus)
    return r, r.search(queries, 50)


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-query |a ∩ b| / |b| of two id matrices."""
    return float(np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(a, b)]))


def assert_same_ranking(got, want, scores_got, scores_want, atol=1e-5):
    """Same scores (within ``atol``) and the same ids wherever the reference scores are not (near-)tied."""
    np.testing.assert_allclose(scores_got, scores_want, atol=atol)
    close = np.abs(np.diff(scores_want, axis=1)) <= atol
    tied = np.zeros(np.shape(want), dtype=bool)
    tied[:, :-1] |= close
    tied[:, 1:] |= close
    assert ((np.asarray(got) == np.asarray(want)) | tied).all()


# ------------------------------------------------------------ shards, exact
@pytest.mark.slow
def test_mmapped_shards_give_the_same_flat_results_as_one_in_memory_index(slice_, flat):
    import faiss

    from retrievers.faiss_index import EmbeddingShards, flat_search

    corpus, queries, gold = slice_
    r, ranking = flat
    shards = r._searcher.shards
    assert shards.memory_mapped and len(shards.parts) == -(-N_ROWS // SHARD) and len(shards) == N_ROWS
    full = r.encode_corpus(corpus)  # the same embeddings in one array
    assert full.shape == (N_ROWS, 384) and not isinstance(full, np.memmap)
    index = faiss.IndexFlatIP(full.shape[1])
    index.add(full)
    q = r.encode_queries(queries)
    want_s, want_i = index.search(q, 50)
    assert_same_ranking(ranking.ids, want_i, ranking.scores, want_s)
    # the same search over in-memory parts of another size, and past the corpus size (padding)
    mem = EmbeddingShards([full[i : i + 257] for i in range(0, N_ROWS, 257)])
    s2, i2 = flat_search(mem, q, N_ROWS + 5)
    assert (i2[:, N_ROWS:] == -1).all() and np.isneginf(s2[:, N_ROWS:]).all()
    assert_same_ranking(i2[:, :50], want_i, s2[:, :50], want_s)
    assert sorted(i2[0, :N_ROWS]) == list(range(N_ROWS))
    # the retriever finds the gold sentence for most questions (real embeddings, not noise)
    assert np.mean([g[0] in ids[:10] for g, ids in zip(gold, ranking.ids)]) > 0.6


def test_exact_search_ties_go_to_the_lower_row():
    from retrievers.faiss_index import EmbeddingShards, flat_search

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    x[[40, 120, 250, 251]] = x[7]  # five identical vectors in three shards
    s, i = flat_search(EmbeddingShards([x[:100], x[100:200], x[200:]]), x[7:8], 3)
    assert i[0].tolist() == [7, 40, 120]  # ties at the cut keep the lower rows, in row order
    assert s[0, 0] == s[0, 2]


def test_exact_search_settles_ties_at_the_cut_by_row_for_any_blocks_batch_and_depth():
    """FAISS's own selection keeps an arbitrary subset of the rows tied at its k-th score (its reservoir for k >= 100,
    its heaps too): small-integer vectors make every dot product exact in any summation order and full of ties, so
    numpy's (score desc, row asc) order is the reference for every block size, shard size, batch size and depth."""
    import faiss

    from retrievers.faiss_index import EmbeddingShards, flat_search

    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (12000, 16)).astype(np.float32)
    q = rng.integers(-2, 3, (120, 16)).astype(np.float32)
    rows = np.broadcast_to(np.arange(len(x)), (len(q), len(x)))
    want = np.lexsort((rows, -(q @ x.T).astype(np.float64)), axis=1)
    threshold = faiss.cvar.distance_compute_blas_threshold
    for parts in (4096, 1000):
        shards = EmbeddingShards([x[i : i + parts] for i in range(0, len(x), parts)])
        for block_bytes in (0, 1 << 18, 48 << 20):  # each shard / a few shards copied together / everything in one block
            for nq in (120, 5):  # the BLAS path and FAISS's per-query loop
                for k in (10, 100, 1000):
                    s, i = flat_search(shards, q[:nq], k, block_bytes=block_bytes)
                    assert np.array_equal(i, want[:nq, :k]), (parts, block_bytes, nq, k)
                    assert np.array_equal(s, np.take_along_axis(q[:nq] @ x.T, want[:nq, :k], axis=1))
    assert faiss.cvar.distance_compute_blas_threshold == threshold  # lowered for our calls only


def test_exact_search_over_mmapped_shards_holds_one_block_not_the_corpus(slice_, flat, tmp_path):
    from retrievers.faiss_index import EmbeddingShards, flat_search

    corpus, queries, _ = slice_
    r, exact = flat
    emb = r.encode_corpus(corpus)
    paths = []
    for i in range(16):  # 16 copies of the real embeddings: a 15.7 MB corpus on disk
        paths.append(tmp_path / f"shard{i}.npy")
        np.save(paths[-1], emb)
    q = r.encode_queries(queries[:50])
    block = 1 << 21  # small shards are copied together into one block of at most this many bytes
    tracemalloc.start()
    shards = EmbeddingShards.from_files(paths)
    s, i = flat_search(shards, q, 10, block_bytes=block)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert shards.memory_mapped and len(shards) == 16 * N_ROWS and shards.nbytes > 7 * block
    assert peak < block + shards.nbytes / 16, f"exact search allocated {peak} bytes over a {shards.nbytes}-byte corpus"
    # the 16 copies of each query's best sentence tie: the 10 lowest rows win, lowest first
    np.testing.assert_array_equal(i, exact.ids[:50, :1] + N_ROWS * np.arange(10))
    np.testing.assert_allclose(s, np.repeat(exact.scores[:50, :1], 10, axis=1), atol=1e-6)


# ----------------------------------------------------------- factory indexes
@pytest.mark.slow
def test_factory_index_round_trips_through_the_cache(slice_, flat, cache):
    from retrievers.faiss_index import IndexSearcher, cached_index

    corpus, queries, _ = slice_
    spec = "IVF16,PQ16x4"  # trained (k-means and PQ), compressed
    first = dense(index_type=spec, train_sample=500, seed=3).index(corpus)
    assert first.index_info_["cache"] == "built" and first.index_info_["train_rows"] == 500
    loaded = dense(index_type=spec, train_sample=500, seed=3).index(corpus)
    assert loaded.index_info_["cache"] == "loaded"
    index, info = cached_index(spec, first.embedding_shards(corpus), None, 500, 3)  # fresh, uncached
    assert info["cache"] == "off"
    a, b = first.search(queries, 20), loaded.search(queries, 20)
    c_scores, c_ids = IndexSearcher(index).search(first.encode_queries(queries), 20)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.ids, c_ids)
    np.testing.assert_array_equal(a.scores, c_scores)
    # another training sample is another index (another cache entry)
    other = dense(index_type=spec, train_sample=500, seed=4).index(corpus)
    assert other.index_info_["cache"] == "built" and other.index_info_["key"] != first.index_info_["key"]
    # compressed, but still a retriever: most of the exact top 20 comes back
    assert overlap(a.ids, flat[1].ids[:, :20]) > 0.5


@pytest.mark.parametrize("damage", ["flip", "truncate"])
@pytest.mark.slow
def test_damaged_cached_index_warns_and_is_rebuilt(slice_, flat, capsys, damage):
    corpus, queries, _ = slice_
    spec = "IVF8,SQ8"
    r = dense(index_type=spec, train_sample=400).index(corpus)
    want = r.search(queries, 10)
    path = r.index_info_["path"]
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 3]
    with open(path, "wb") as f:
        f.write(data)
    capsys.readouterr()
    again = dense(index_type=spec, train_sample=400).index(corpus)
    err = capsys.readouterr().err
    assert "warning:" in err and "damaged" in err and again.index_info_["cache"] == "built"
    got = again.search(queries, 10)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_array_equal(got.scores, want.scores)
    third = dense(index_type=spec, train_sample=400).index(corpus)  # the rebuilt file is good
    assert third.index_info_["cache"] == "loaded"


@pytest.mark.slow
def test_refine_reranks_candidates_by_exact_scores_read_from_the_shards(slice_, flat):
    corpus, queries, _ = slice_
    exact_r, exact = flat
    spec = "IVF16,PQ16x4"
    plain = dense(index_type=spec, train_sample=500, nprobe=4).index(corpus)
    refined = dense(index_type=spec, train_sample=500, nprobe=4, refine=3).index(corpus)
    assert refined.index_info_["cache"] == "loaded"  # refine is a search step: the same cached index
    assert refined.index_info_["refine"]["k_factor"] == 3.0
    a, b = plain.search(queries, 20), refined.search(queries, 20)
    # the refined scores are the exact inner products of the ids returned, ordered by (score desc, row asc)
    emb = exact_r.embedding_shards(corpus).to_array()
    q = refined.encode_queries(queries)
    want = np.einsum("qd,qkd->qk", q, emb[b.ids])
    np.testing.assert_allclose(b.scores, want, atol=1e-5)
    assert (np.diff(b.scores, axis=1) <= 1e-6).all()
    # they are the exact top 20 of the 60 candidates the index proposes
    _, cand = dense(index_type=spec, train_sample=500, nprobe=4).index(corpus)._searcher.search(q, 60)
    for row_ids, cands, qv in zip(b.ids, cand, q):
        s = emb[cands] @ qv
        top = cands[np.lexsort((cands, -s))[:20]]
        assert set(row_ids) == set(top)
    # and closer to exact search than the compressed scores were
    assert overlap(b.ids, exact.ids[:, :20]) > overlap(a.ids, exact.ids[:, :20]) + 0.1
    # candidates covering every list and row: exact search itself
    full = dense(index_type=spec, train_sample=500, nprobe=16, refine=len(corpus)).index(corpus)
    got = full.search(queries, 50)
    assert_same_ranking(got.ids, exact.ids, got.scores, exact.scores)


def test_refine_needs_a_factory_index(slice_):
    corpus, _, _ = slice_
    with pytest.raises(UserError, match="flat is exact"):
        dense(refine=2).index(corpus)
    with pytest.raises(UserError, match="factor must be >= 1"):
        dense(index_type="IVF16,Flat", refine=0).index(corpus)
    with pytest.raises(UserError, match="prebuilt"):
        dense(index_type="IVF16,Flat", refine=2, index_dir="/nonexistent").index(corpus)


def test_nprobe_all_lists_equals_flat_and_one_list_does_not(slice_, flat):
    corpus, queries, _ = slice_
    _, exact = flat
    full = dense(index_type="IVF32,Flat", nprobe=32).index(corpus)
    assert full.index_info_["params"] == {"nprobe": 32}
    got = full.search(queries, 50)
    assert_same_ranking(got.ids, exact.ids, got.scores, exact.scores)
    one = dense(index_type="IVF32,Flat", nprobe=1).index(corpus)
    assert one.index_info_["cache"] == "loaded"  # nprobe is a search parameter: same cached index
    recall_one = overlap(one.search(queries, 50).ids, exact.ids)
    default = dense(index_type="IVF32,Flat").index(corpus)
    assert default.index_info_["params"] == {"nprobe": 11}  # 2 sqrt(32)
    recall_default = overlap(default.search(queries, 50).ids, exact.ids)
    assert recall_one < recall_default < 1.0


@pytest.mark.slow
def test_ef_search_is_set_and_widens_hnsw_search(slice_, flat):
    import faiss

    corpus, queries, _ = slice_
    _, exact = flat
    narrow = dense(index_type="HNSW4", ef_search=10).index(corpus)
    wide = dense(index_type="HNSW4", ef_search=400).index(corpus)
    assert faiss.downcast_index(wide._searcher.index).hnsw.efSearch == 400
    assert narrow.index_info_["params"] == {"efSearch": 10}
    r_narrow = overlap(narrow.search(queries, 10).ids, exact.ids[:, :10])
    r_wide = overlap(wide.search(queries, 10).ids, exact.ids[:, :10])
    assert r_narrow < r_wide and r_wide > 0.99
    legacy = dense(index_type="hnsw", hnsw_m=4, ef_search=400).index(corpus)  # "hnsw" = HNSW<m>
    np.testing.assert_array_equal(legacy.search(queries, 10).ids, wide.search(queries, 10).ids)


def test_bad_factory_string_fails_before_encoding(slice_):
    corpus, _, _ = slice_
    r = dense(index_type="IVF16,PQ7")  # 7 does not divide 384
    with pytest.raises(UserError, match="not a FAISS index factory string") as err:
        r.index(corpus)
    # FAISS's own reason, whole, without its source file and check expression
    assert "(The dimension of the vector (d) should be a multiple of the number of subquantizers (M));" in str(err.value)
    assert ".cpp" not in str(err.value)
    assert not hasattr(r, "encode_stats_")
    with pytest.raises(UserError, match="inverted lists need at least"):
        dense(index_type="IVF1024,Flat").index(corpus)


# --------------------------------------------------------- prebuilt layouts
def _pyserini_faiss():
    from retrievers.java import pyserini_import_env

    with pyserini_import_env():
        from pyserini.search.faiss import FaissSearcher
    return FaissSearcher


def _write_layout(path, vectors, docids, factory="Flat"):
    import faiss

    path.mkdir()
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(vectors)
    index.add(vectors)
    faiss.write_index(index, str(path / "index"))
    (path / "docid").write_text("".join(f"{d}\n" for d in docids), encoding="utf-8")


@pytest.mark.slow
def test_prebuilt_pyserini_layout_is_searched_like_pyserini_does(slice_, flat, tmp_path):
    corpus, queries, _ = slice_
    r, exact = flat
    emb = r.encode_corpus(corpus)
    q = r.encode_queries(queries)
    perm = np.random.default_rng(5).permutation(N_ROWS)  # the index holds the corpus in another order
    docids = [corpus.ids[i] for i in perm]
    _write_layout(tmp_path / "same", emb[perm], docids)
    pre = dense(index_dir=str(tmp_path / "same")).index(corpus)
    assert pre.index_info_["missing_rows"] == 0 and "encode_stats_" not in vars(pre)  # the corpus was not encoded
    got = pre.search(queries, 30)
    assert_same_ranking(got.ids, exact.ids[:, :30], got.scores, exact.scores[:, :30])
    # Pyserini's own searcher on the same directory and query vectors: the same docids, scores and order
    searcher = _pyserini_faiss()(str(tmp_path / "same"), None)
    hits = searcher.batch_search(q, [str(j) for j in range(len(q))], k=30)
    row_of = {d: i for i, d in enumerate(corpus.ids)}
    for j in range(len(q)):
        want_rows = [row_of[h.docid] for h in hits[str(j)]]
        want_scores = np.array([h.score for h in hits[str(j)]], dtype=np.float32)
        assert_same_ranking(got.ids[j : j + 1], np.array([want_rows]), got.scores[j : j + 1], want_scores[None])

    # an index holding documents this corpus lacks, and lacking some of its rows
    rng = np.random.default_rng(6)
    extra = rng.standard_normal((50, emb.shape[1])).astype(np.float32)
    extra /= np.linalg.norm(extra, axis=1, keepdims=True)
    keep = perm[: N_ROWS - 40]
    extra[:30] = q[:30]  # foreign documents that would be the best hit of the first 30 questions
    mixed = np.concatenate([emb[keep], extra])
    _write_layout(tmp_path / "mixed", mixed, [corpus.ids[i] for i in keep] + [f"foreign-{i}" for i in range(50)])
    part = dense(index_dir=str(tmp_path / "mixed")).index(corpus)
    assert part.index_info_["missing_rows"] == 40
    res = part.search(queries, 20)
    assert set(res.ids.ravel().tolist()) <= set(keep.tolist())  # never a foreign document, never a missing row
    ref = _pyserini_faiss()(str(tmp_path / "mixed"), None).batch_search(q, [str(j) for j in range(len(q))], k=80)
    for j in range(len(q)):
        kept = [h for h in ref[str(j)] if not h.docid.startswith("foreign-")][:20]
        assert_same_ranking(res.ids[j : j + 1], np.array([[row_of[h.docid] for h in kept]]),
                            res.scores[j : j + 1], np.array([[h.score for h in kept]], dtype=np.float32))


def test_prebuilt_layout_errors_are_user_errors(slice_, tmp_path):
    corpus, _, _ = slice_
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a Pyserini dense index directory"):
        dense(index_dir=str(tmp_path / "empty")).index(corpus)
    rng = np.random.default_rng(0)
    _write_layout(tmp_path / "wrongdim", rng.standard_normal((10, 8)).astype(np.float32), corpus.ids[:10])
    with pytest.raises(UserError, match="8 dimensions"):
        dense(index_dir=str(tmp_path / "wrongdim")).index(corpus)
    _write_layout(tmp_path / "count", rng.standard_normal((10, 384)).astype(np.float32), corpus.ids[:9])
    with pytest.raises(UserError, match="9 docids for the 10 vectors"):
        dense(index_dir=str(tmp_path / "count")).index(corpus)
    with pytest.raises(UserError, match="no such index directory"):
        dense(index_dir=str(tmp_path / "nowhere")).index(corpus)


# --------------------------------------------------------------------- flags
def test_cli_flags_reach_the_dense_retriever():
    from pipeline.experiment import retriever_options
    from pipeline.run import parse_config
    from retrievers.registry import make_retriever

    config, _ = parse_config(["--retriever", "rrf:bm25+dense", "--dense-index", "OPQ16,IVF256,PQ16", "--nprobe", "9",
                              "--ef-search", "77", "--dense-train-sample", "5000", "--seed", "21", "--dense-refine", "4"])
    r = make_retriever(config.retriever.spec, options=retriever_options(config))
    d = r.members[1]
    assert (d.index_type, d.nprobe, d.ef_search, d.train_sample, d.seed, d.refine) == ("OPQ16,IVF256,PQ16", 9, 77, 5000, 21, 4.0)
    plain, _ = parse_config(["--retriever", "dense"])
    d = make_retriever("dense", options=retriever_options(plain))
    assert (d.index_type, d.nprobe, d.ef_search, d.index_dir, d.refine) == ("flat", None, 128, None, None)


# ------------------------------------------------------------ fused, blocked
@pytest.mark.parametrize("spec", ["rrf", "fuse-zscore", "fuse-minmax", "route-stat", "route", "mrrank"])
def test_fused_retrievers_fuse_block_by_block_exactly_as_all_at_once(spec, monkeypatch):
    """search() fuses FUSE_BLOCK queries at a time; each query's result must not depend on its block."""
    from retrievers import pooling
    from retrievers.fusion import build_fused, needs_fit
    from tests.fusion_toys import RecordingRetriever, ScrambleRetriever, WhRuleRetriever, planted_dataset

    train, dev = planted_dataset("train", n_queries=60, seed=1), planted_dataset("dev", n_queries=37, seed=2)
    members = [RecordingRetriever(ScrambleRetriever("a", gold_max_rank=10, seed=1)),
               RecordingRetriever(WhRuleRetriever("b", "who", peaked=True))]
    opts = {"depth": "10", "seed": "0", "epochs": "4"} if spec == "mrrank" else {"depth": "10"}
    if spec == "route":
        opts = {"depth": "10", "seed": "0"}
    fused = build_fused(spec, members, opts)
    if needs_fit(fused):
        fused.fit(train)
    fused.index(dev.corpus)
    for k in (10, 25):  # 25 > depth: MrRank appends candidates beyond its pool
        whole = fused.fuse(dev.queries.texts, pooling.search_members(members, dev.queries.texts, max(10, k)), k) \
            if spec in ("route-stat", "route", "mrrank") else fused.fuse(pooling.search_members(members, dev.queries.texts, max(10, k)), k)
        monkeypatch.setattr(pooling, "FUSE_BLOCK", 8)
        members[0].searched.clear()
        blocked = fused.search(dev.queries.texts, k)
        monkeypatch.setattr(pooling, "FUSE_BLOCK", 1024)
        assert members[0].searched == list(dev.queries.texts)  # every query searched once, in order
        np.testing.assert_array_equal(blocked.ids, whole.ids)
        np.testing.assert_array_equal(blocked.scores, whole.scores)
        assert blocked.ids.shape == (len(dev.queries), k)


@pytest.mark.slow
def test_block_fusion_holds_one_blocks_pool_not_the_whole_batch(monkeypatch):
    from retrievers import pooling
    from retrievers.rrf import RRFRetriever
    from tests.fusion_toys import ScrambleRetriever, planted_dataset

    dev = planted_dataset("dev", n_queries=400, n_distractors=600, seed=2)
    members = [ScrambleRetriever("a", gold_max_rank=10, seed=1), ScrambleRetriever("b", gold_max_rank=10, seed=2)]
    rrf = RRFRetriever(members, depth=500).index(dev.corpus)

    def peak_of_fusion(block):
        monkeypatch.setattr(pooling, "FUSE_BLOCK", block)
        orig = pooling.pool_rankings
        peaks = []

        def tracked(rankings):
            tracemalloc.reset_peak()
            start, _ = tracemalloc.get_traced_memory()
            out = orig(rankings)
            peaks.append(tracemalloc.get_traced_memory()[1] - start)
            return out

        monkeypatch.setattr("retrievers.rrf.pool_rankings", tracked)
        tracemalloc.start()
        try:
            ranking = rrf.search(dev.queries.texts, 500)
        finally:
            tracemalloc.stop()
        return ranking, max(peaks)

    whole, peak_whole = peak_of_fusion(10_000)
    blocked, peak_blocked = peak_of_fusion(50)
    np.testing.assert_array_equal(blocked.ids, whole.ids)
    assert peak_blocked < peak_whole / 4  # 8 blocks: the pool is an eighth of the size
