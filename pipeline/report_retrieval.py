"""The retrieval half of ``pipeline.report``: where each question's first gold passage ranks, and what came first.

Built from the files a ``pipeline.run`` directory holds -- ``run.trec`` (the
whole ranking, ``--depth`` per question), ``qrels.tsv`` (or ``qrels.trec``; a passage is gold
when its grade is > 0), ``queries.jsonl`` and ``per_query.jsonl`` -- and, for
the passages' texts, the dataset the manifest names, loaded again as the run
loaded it (``data.registry.load_dataset`` with the manifest's data settings;
from the local cache for built-in sets).  When the dataset cannot be loaded
the browser still shows ids, ranks and scores, and says why the texts are
missing.

* a summary: how many questions have their first gold passage at rank 1,
  2-5, 6-10, 11-100, 101 to run.trec's depth, beyond it but within the
  retrieval depth (a run.trec cut shorter, e.g. written before run.trec held
  the whole ranking: from per_query.jsonl's ``rr``), or not within the
  retrieval depth;
* a per-question browser: the question (and its gold answers when the dataset
  has them), the rank of its first gold passage in run.trec (or "not within
  the top N"), the top passages (rank, id, retriever score, text; the gold
  ones marked; on sentence-level sets, sentences of a gold paragraph too) and
  the gold passages that are not among them, with their rank or "not within
  the top N".  Filters: first gold not in run.trec (``missed``), first gold
  below rank k (``k``), a rank bucket of the summary (``bucket``), and a
  dataset field when the run has one with several values (the SQuAD article
  of a question, read from the dataset's SQuAD file; the title of the first
  gold passage on corpora with titles; any text column of per_query.jsonl).
  Filters are preset in the address (``report.html#missed=1&k=5``) and kept
  there as they change; pages of 25 questions are rendered on demand.

Texts are cut at ``chars`` characters (said in the page) and each passage's
text is stored once however many questions retrieved it, so a full dev run
(10,570 questions, top 10) stays a few MB.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = 10  # passages shown per question
CHARS = 400  # characters kept of a passage's text
GOLD_SHOWN = 20  # gold passages outside the top listed per question (the rest counted)
RESERVED = {"missed", "k", "bucket", "rpage", "page", "wrong", "kind", "n"}  # address keys the report uses

CSS = """
.controls{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #eee;z-index:1}
.rq{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.rq.b0{border-left:6px solid #3a3}.rq.b1{border-left:6px solid #9c3}.rq.b2{border-left:6px solid #db3}
.rq.b3{border-left:6px solid #e90}.rq.b4{border-left:6px solid #d55}.rq.b5{border-left:6px solid #b00}.rq.b6{border-left:6px solid #999}
.rp{margin:3px 0 3px 12px;padding:3px 6px;background:#fafafa}.rp.gold{background:#dff5df;outline:1px solid #7c7}
.rp.para{outline:1px dashed #7c7}.rp .meta b{color:#262}.rp.lost{background:#fde8e8}
.rsub{margin:6px 0 2px 12px;font-size:12px;color:#555}.controls label,.controls select{margin-right:10px}
"""

JS = r"""
(function(){
const R = JSON.parse(document.getElementById('retrieval-data').textContent);
const P = R.passages, Q = R.questions, PAGE = %(page)d, PAGE_KEY = R.page_key;
const $ = id => document.getElementById(id);
let page = 0;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));}
function kValue(){ const k = parseInt($('r-k').value, 10); return isNaN(k) ? null : k; }
function kept(){
  const missed = $('r-missed').checked, k = kValue(), b = $('r-bucket').value;
  const fs = R.fields.map((f, i) => f.filter ? $('r-field-' + i).value : 'all');
  return Q.filter(d => (!missed || d.r === null) && (k === null || d.r === null || d.r > k) &&
    (b === 'all' || String(d.s) === b) && fs.every((v, i) => v === 'all' || String(d.f[i]) === v));
}
function text(p){ const t = P[p][1]; return t === null ? '<i class="meta">text not available</i>' : esc(t) + (P[p][2] ? '…' : ''); }
function passage(p, head, cls){
  return '<div class="rp ' + cls + '"><span class="meta">' + head + ' · ' + esc(P[p][0]) + '</span><br>' + text(p) + '</div>';
}
function firstGold(d){
  if (d.r !== null) return 'first gold at rank ' + d.r;
  if (d.s === R.bucket_beyond) return 'first gold not within the top ' + R.depth + ' (rank ≈ ' + d.b + ' of ' + R.retrieval_depth + ')';
  if (d.s === R.bucket_nogold) return 'no gold passage in the qrels';
  return 'first gold not within depth ' + (R.retrieval_depth || R.depth);
}
function render(){
  const rows = kept(), pages = Math.max(1, Math.ceil(rows.length / PAGE)); page = Math.max(0, Math.min(page, pages - 1));
  $('r-count').textContent = rows.length + ' questions, page ' + (page + 1) + ' of ' + pages;
  $('r-questions').innerHTML = rows.slice(page * PAGE, (page + 1) * PAGE).map(d => {
    const paras = new Set(d.gp || []);
    const top = d.t.map(([p, score, gold], i) => {
      const para = !gold && P[p][3] >= 0 && paras.has(P[p][3]);
      return passage(p, '#' + (i + 1) + ' · score ' + score + (gold ? ' · <b>gold</b>' : para ? ' · gold paragraph' : ''),
                     gold ? 'gold' : para ? 'para' : '');
    }).join('');
    const lost = (d.o || []).map(([p, rank]) => passage(p, (rank === null ? 'not within the top ' + R.depth : 'rank ' + rank) + ' · <b>gold</b>',
                                              'gold' + (rank === null ? ' lost' : ''))).join('');
    const more = d.om ? '<div class="rsub">… and ' + d.om + ' more gold passages</div>' : '';
    const fields = R.fields.map((f, i) => d.f[i] >= 0 ? ' · ' + esc(f.label) + ': ' + esc(f.values[d.f[i]]) : '').join('');
    const metrics = (d.pr === undefined ? '' : ' · gold paragraph ' + (d.pr ? 'rank ≈ ' + d.pr : 'not within depth')) +
      Object.entries(d.m || {}).map(([k, v]) => ' · ' + esc(k) + ' ' + v).join('');
    return '<div class="rq b' + d.s + '"><b>' + esc(d.q) + '</b> <span class="meta">' + esc(d.id) + fields + ' · ' +
      d.gn + ' gold' + metrics + '</span><br><span class="first">' + firstGold(d) + '</span>' +
      (d.a && d.a.length ? ' · answers: ' + d.a.map(a => '<mark class="gold">' + esc(a) + '</mark>').join(' · ') : '') +
      '<div class="rsub">top ' + d.t.length + ' passages (run.trec)</div>' + top +
      (lost || more ? '<div class="rsub">gold passages not in the top ' + d.t.length + '</div>' + lost + more : '') + '</div>';
  }).join('');
}
function address(){  // the filters into the address (other keys kept), so a filtered view can be shared
  const h = new URLSearchParams(location.hash.slice(1)), k = kValue(), b = $('r-bucket').value;
  $('r-missed').checked ? h.set('missed', '1') : h.delete('missed');
  k === null ? h.delete('k') : h.set('k', String(k));
  b === 'all' ? h.delete('bucket') : h.set('bucket', b);
  R.fields.forEach((f, i) => { if (!f.filter) return; const v = $('r-field-' + i).value;
    v === 'all' ? h.delete(f.name) : h.set(f.name, f.values[+v]); });
  page ? h.set(PAGE_KEY, String(page + 1)) : h.delete(PAGE_KEY);
  history.replaceState(null, '', '#' + h.toString());
}
function preset(){  // report.html#missed=1&k=5&bucket=3&article=Warsaw&rpage=2
  const h = new URLSearchParams(location.hash.slice(1));
  $('r-missed').checked = h.get('missed') === '1';
  $('r-k').value = h.get('k') || '';
  $('r-bucket').value = R.buckets.some((_, i) => String(i) === h.get('bucket')) ? h.get('bucket') : 'all';
  R.fields.forEach((f, i) => { if (!f.filter) return; const v = f.values.indexOf(h.get(f.name));
    $('r-field-' + i).value = v >= 0 ? String(v) : 'all'; });
  page = Math.max(0, parseInt(h.get(PAGE_KEY), 10) - 1) || 0;
  render();
}
$('r-bucket').innerHTML = '<option value="all">any first-gold rank</option>' +
  R.buckets.map((b, i) => '<option value="' + i + '">' + esc(b) + '</option>').join('');
R.fields.forEach((f, i) => { if (!f.filter) return; $('r-field-' + i).innerHTML = '<option value="all">every ' + esc(f.label) + '</option>' +
  f.values.map((v, j) => '<option value="' + j + '">' + esc(v) + '</option>').join(''); });
['r-missed', 'r-bucket'].concat(R.fields.map((f, i) => f.filter ? 'r-field-' + i : null).filter(Boolean))
  .forEach(id => $(id).addEventListener('change', () => { page = 0; render(); address(); }));
$('r-k').addEventListener('input', () => { page = 0; render(); address(); });
$('r-prev').onclick = () => { page = Math.max(0, page - 1); render(); address(); };
$('r-next').onclick = () => { page += 1; render(); address(); };
window.addEventListener('hashchange', preset);  // the summary's links
preset();
})();
"""


# ------------------------------------------------------------------ the files
def read_relevant(directory: Path) -> dict[str, dict[str, int]] | None:
    """``qid -> {docid: grade}`` of the gold passages (grade > 0), from qrels.tsv or qrels.trec; None when neither."""
    from eval.qrels import read_qrels

    for name in ("qrels.tsv", "qrels.trec"):
        if (directory / name).is_file():
            return {q: {d: g for d, g in docs.items() if g > 0} for q, docs in read_qrels(directory / name).items()}
    return None


def _jsonl(path: Path) -> list[dict]:
    from data.errors import UserError

    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise UserError(f"{path}:{n}: not valid JSON") from None
    return rows


# ---------------------------------------------------------------- the dataset
def load_run_dataset(directory: Path, data_dir: str | None = None):
    """The dataset the run's manifest names, loaded with the run's data settings (questions not limited);
    ``data_dir`` replaces the run's data directory (its ``--data-dir``, else ``$QA_DATA_DIR`` now)."""
    from data.registry import load_dataset

    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    data = (manifest.get("config") or {}).get("data") or {}
    if not data.get("dataset"):
        raise ValueError("manifest.json names no dataset")
    dataset = load_dataset(data["dataset"], data.get("split") or "dev", data_dir=data_dir or data.get("data_dir"),
                           data_file=data.get("data_file"), skip_bad_records=bool(data.get("skip_bad_records")),
                           answer_match=data.get("answer_match"), language=data.get("language"))
    changed = [k for k, v in (manifest.get("data") or {}).items()
               if k in dataset.sources and isinstance(v, str) and str(dataset.sources[k]) != v]
    return dataset, changed


def _rows_of(corpus, ids) -> dict[str, int]:
    """Corpus row of each id present (one vectorized pass on store-backed corpora)."""
    col = corpus.ids
    if hasattr(col, "store") and getattr(col, "rows", 0) is None and hasattr(col.store, "rows_of_ids"):
        return col.store.rows_of_ids(ids)
    wanted = set(ids)
    return {d: i for i, d in enumerate(col) if d in wanted}


def _squad_titles(sources) -> dict[str, str]:
    """SQuAD question id -> article title, from the SQuAD-format files among a dataset's sources."""
    from data.squad import read_json_file

    titles: dict[str, str] = {}
    for key in sources:
        for path in (Path(str(key)), ROOT / str(key)):
            name = path.name.lower()
            if not (name.endswith((".json", ".json.gz", ".json.zip", ".zip")) and path.is_file()
                    and path.stat().st_size < 500_000_000):
                continue
            try:
                squad = read_json_file(path)
                for article in squad.get("data", []):
                    title = str(article.get("title", "")).replace("_", " ")
                    for para in article.get("paragraphs", []):
                        for qa in para.get("qas", []):
                            titles.setdefault(str(qa["id"]), title)
            except Exception:  # not a SQuAD file: no titles from it
                pass
            break
    return titles


# ------------------------------------------------------------------- the data
def bucket_labels(depth: int, retrieval_depth: int | None) -> tuple[list[str], list[int]]:
    """The summary's buckets: labels and the upper rank of each rank bucket (1, 2-5, 6-10, 11-depth)."""
    edges = [e for e in (1, 5, 10, 100) if e < depth] + [depth]
    labels, lo = [], 1
    for e in edges:
        labels.append(f"rank {e}" if lo == e else f"rank {lo}–{e}")
        lo = e + 1
    beyond = retrieval_depth if retrieval_depth and retrieval_depth > depth else None
    labels.append(f"beyond rank {depth} (within depth {beyond})" if beyond else f"beyond rank {depth}")
    labels.append(f"not within depth {max(depth, retrieval_depth or 0)}")
    labels.append("no gold passage in the qrels")
    return labels, edges


def retrieval_data(directory: str | Path, metrics: dict, *, top: int = TOP, chars: int = CHARS,
                   page_key: str = "rpage", data_dir: str | None = None) -> dict:
    """What the retrieval browser shows, as JSON-able data (see the module docstring)."""
    from data.errors import UserError
    from retrievers.trec import read_run

    directory = Path(directory)
    if not (directory / "run.trec").is_file():
        raise UserError(f"{directory}: no run.trec")
    relevant = read_relevant(directory)
    if relevant is None:
        raise UserError(f"{directory}: no qrels.tsv or qrels.trec")
    # run.trec holds the whole ranking (--depth per question, millions of lines at 1000): what is shown is each
    # question's top and where its gold passages rank
    stats: dict = {}
    run = read_run(directory / "run.trec", keep=lambda q, d, r: r <= top or d in relevant.get(q, ()), stats=stats)
    queries = _jsonl(directory / "queries.jsonl")
    per_query = {str(r.get("id")): r for r in _jsonl(directory / "per_query.jsonl")}
    order = [str(q["_id"]) for q in queries] or list(dict.fromkeys(list(run) + list(relevant)))
    texts = {str(q["_id"]): str(q.get("text", "")) for q in queries}
    depth = stats["depth"]
    reqa = (metrics.get("retrieval") or {}).get("reqa") or {}
    retrieval_depth = reqa.get("depth") or depth
    labels, edges = bucket_labels(depth, retrieval_depth)
    beyond, missed, nogold = len(edges), len(edges) + 1, len(edges) + 2

    sentences = metrics.get("level") == "sentence"  # candidates are sentences of paragraphs (ReQA)
    # the passages every question shows: its top, and its gold ones outside the top
    questions, wanted = [], {}
    for qid in order:
        hits, gold = run.get(qid, []), relevant.get(qid, {})
        rank_of = {d: r for r, d, _ in hits}
        gold_ranks = sorted(((rank_of.get(d), d) for d in gold), key=lambda t: (t[0] is None, t[0] or 0, t[1]))
        first = gold_ranks[0][0] if gold_ranks else None
        row = per_query.get(qid, {})
        rr = row.get("rr")
        if not gold:
            s, approx = nogold, None
        elif first is not None:
            s, approx = next(i for i, e in enumerate(edges) if first <= e), None
        elif isinstance(rr, (int, float)) and rr > 0 and retrieval_depth > depth:
            s, approx = beyond, round(1.0 / rr)
        else:
            s, approx = missed, None
        shown = hits[:top]
        outside = [(d, r) for r, d in gold_ranks if r is None or r > len(shown)]
        for _, d, _ in shown:
            wanted.setdefault(d, len(wanted))
        for d, _ in outside[:GOLD_SHOWN]:
            wanted.setdefault(d, len(wanted))
        q = {"id": qid, "q": texts.get(qid, ""), "r": first, "s": s, "gn": len(gold),
             "t": [[wanted[d], round(score, 4), int(d in gold)] for _, d, score in shown], "f": [],
             "_gold": [d for _, d in gold_ranks]}  # best ranked first; not in the page
        if approx is not None:
            q["b"] = approx
        if outside:  # empty keys are left out: a full dev run has 10,000 questions
            q["o"] = [[wanted[d], r] for d, r in outside[:GOLD_SHOWN]]
        if len(outside) > GOLD_SHOWN:
            q["om"] = len(outside) - GOLD_SHOWN
        if sentences and isinstance(row.get("paragraph_rr"), (int, float)):  # ReQA's gold paragraph rank (0: not within)
            q["pr"] = round(1 / row["paragraph_rr"]) if row["paragraph_rr"] > 0 else 0
        m = {name: round(row[name], 4) for name in ("ndcg@10", "mrr@10") if isinstance(row.get(name), (int, float))}
        if m:
            q["m"] = m
        questions.append(q)

    ids = list(wanted)
    passages = [[d, None, 0, -1] for d in ids]
    notes, fields = [], []
    if (directory / "manifest.json").is_file():
        try:
            dataset, changed = load_run_dataset(directory, data_dir)
        except Exception as e:  # texts are a convenience: ids, ranks and scores stay
            notes.append(f"passage texts not available: the dataset could not be loaded again ({type(e).__name__}: {e}); "
                         "set QA_DATA_DIR or pass --data-dir as for the run")
            dataset = None
        if dataset is not None:
            if changed:
                notes.append(f"the dataset's files changed since the run ({', '.join(changed)}): texts may not be the run's")
            fields = _fill_from_dataset(dataset, ids, passages, questions, chars, notes)
    else:
        notes.append("passage texts not available: no manifest.json names the dataset")
    fields += _per_query_fields(order, per_query)
    for q in questions:
        del q["_gold"]
    cut = sum(p[2] for p in passages)
    return {"depth": depth, "retrieval_depth": retrieval_depth, "top": top, "chars": chars, "page_key": page_key,
            "buckets": labels, "bucket_beyond": beyond, "bucket_missed": missed, "bucket_nogold": nogold,
            "passages": passages, "questions": questions, "fields": fields, "notes": notes, "cut": cut,
            "level": metrics.get("level")}


def _fill_from_dataset(dataset, ids, passages, questions, chars, notes) -> list[dict]:
    """Texts (cut at ``chars``), paragraphs and answers from the dataset; returns the fields it knows."""
    from data.types import fetch_rows

    corpus = dataset.corpus
    rows_of = _rows_of(corpus, ids)
    found = [i for i, d in enumerate(ids) if d in rows_of]
    if len(found) < len(ids):
        notes.append(f"{len(ids) - len(found)} passage ids of the run are not in the dataset's corpus: shown without text")
    rows = [rows_of[ids[i]] for i in found]
    sentence = dataset.level == "sentence"
    for i, text in zip(found, fetch_rows(corpus.texts, rows) if rows else []):
        text = str(text)
        passages[i][1] = text[:chars]
        passages[i][2] = int(len(text) > chars)
        if sentence:
            passages[i][3] = int(corpus.paragraph_ids[rows_of[ids[i]]])
    if sentence:  # the paragraphs of each question's gold sentences, to mark their other sentences
        gold_rows = _rows_of(corpus, sorted({d for q in questions for d in q["_gold"]} - set(rows_of)))
        gold_rows.update(rows_of)
        for q in questions:
            q["gp"] = sorted({int(corpus.paragraph_ids[gold_rows[d]]) for d in q["_gold"] if d in gold_rows})
    qs = dataset.queries
    if qs.has_answers:
        answers = {}
        for qid, a in zip(qs.question_ids, qs.answers):
            answers.setdefault(str(qid), list(dict.fromkeys(map(str, a))))
        for q in questions:
            a = answers.get(q["id"]) or answers.get(q["id"].split("#")[0])
            if a:
                q["a"] = a[:5]
    fields = []
    titles = _squad_titles(dataset.sources)
    if titles:
        fields.append(_field("article", "article", [titles.get(q["id"]) or titles.get(q["id"].split("#")[0]) for q in questions]))
    elif corpus.titles is not None:
        first_gold = [q["_gold"][0] if q["_gold"] else None for q in questions]
        gold_rows = _rows_of(corpus, sorted({d for d in first_gold if d is not None}))
        titles_of = dict(zip(gold_rows, fetch_rows(corpus.titles, list(gold_rows.values())))) if gold_rows else {}
        fields.append(_field("title", "title of the first gold passage", [titles_of.get(d) for d in first_gold]))
    return [f for f in fields if f is not None]


def _per_query_fields(order, per_query) -> list[dict]:
    """Text columns of per_query.jsonl (a dataset field a run writes per question) as fields."""
    names = []
    for row in per_query.values():
        names += [k for k, v in row.items() if k != "id" and isinstance(v, str) and k not in names]
    out = []
    for name in names:
        f = _field(name, name, [per_query.get(qid, {}).get(name) for qid in order])
        if f is not None:
            out.append(f)
    return out


def _field(name: str, label: str, values: list) -> dict | None:
    """A field: its distinct values and, per question, the index of its value (-1: none); None when no question has one.
    It is offered as a filter when it has 2 or more values and groups questions (at most half as many values)."""
    present = [v for v in values if v not in (None, "")]
    if not present:
        return None
    distinct = sorted(set(map(str, present)))
    index = {v: i for i, v in enumerate(distinct)}
    key = name if name not in RESERVED else f"field-{name}"
    return {"name": key, "label": label, "values": distinct,
            "filter": 2 <= len(distinct) <= max(2, len(values) // 2), "of": [index.get(str(v), -1) if v not in (None, "") else -1 for v in values]}


# ------------------------------------------------------------------- the HTML
def summary_table(data: dict) -> str:
    counts = [0] * len(data["buckets"])
    for q in data["questions"]:
        counts[q["s"]] += 1
    total = max(1, len(data["questions"]))
    rows = []
    for i, (label, n) in enumerate(zip(data["buckets"], counts)):
        if n == 0 and i >= data["bucket_beyond"]:
            continue  # the buckets that cannot or do not happen in this run
        rows.append(f'<tr><td><a href="#bucket={i}">{html.escape(label)}</a></td><td>{n}</td><td>{100 * n / total:.2f}</td></tr>')
    return ('<table id="first-gold-table"><tr><th>first gold passage at</th><th>questions</th><th>share (%)</th></tr>'
            + "".join(rows) + "</table>")


def retrieval_browser(data: dict, *, page_size: int, title: str = "Retrieval: where the gold passages rank") -> str:
    """The summary and the per-question browser of :func:`retrieval_data`, as HTML (data and script inline)."""
    for f in data["fields"]:
        of = f.pop("of")
        for q, v in zip(data["questions"], of):
            q["f"].append(v)
    depth, top = data["depth"], data["top"]
    selects = "".join(f'<select id="r-field-{i}"></select> ' for i, f in enumerate(data["fields"]) if f["filter"])
    controls = ('<div class="controls" id="r-controls">'
                f'<label><input type="checkbox" id="r-missed"> first gold not within the top {depth}</label> '
                '<label>first gold below rank <input type="number" id="r-k" min="1" style="width:4em"></label> '
                f'<select id="r-bucket"></select> {selects}'
                '<button id="r-prev">◀ prev</button> <button id="r-next">next ▶</button> <span id="r-count"></span>'
                '<div class=meta><span class="rp gold" style="margin:0">gold passage</span>'
                + (' <span class="rp para" style="margin:0">sentence of a gold paragraph</span>' if data.get("level") == "sentence" else "")
                + '</div></div>')
    notes = "".join(f"<p class=meta>note: {html.escape(n)}</p>" for n in data["notes"])
    depth_note = (f"Ranks are run.trec's (the top {depth} the run writes per question; ties in the order written); "
                  f"a question's first gold passage beyond rank {depth} is placed from per_query.jsonl's reciprocal rank "
                  f"(ReQA ranks, ties averaged) within the retrieval depth {data['retrieval_depth']}.")
    shown = (f"Each question shows its top {top} passages and its gold passages outside them; "
             f"texts are cut at {data['chars']} characters ({data['cut']} of {len(data['passages'])} passages were cut), "
             "from the dataset the manifest names.")
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<h2 id="retrieval">{html.escape(title)}</h2>' + summary_table(data)
            + f"<p class=meta>{html.escape(depth_note)} {html.escape(shown)}</p>" + notes + controls
            + '<div id="r-questions"></div>'
            + f'<script type="application/json" id="retrieval-data">{blob}</script>'
            + "<script>" + JS % {"page": page_size} + "</script>")
