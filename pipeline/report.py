"""A self-contained HTML report of a run or a sweep: ``python -m pipeline.report DIR [--out report.html]``.

One HTML file that needs no network to view: CSS and JavaScript inline,
plots embedded as base64 PNG, the data as JSON in the page.

* a ``pipeline.run`` directory: the metrics tables (ReQA, BEIR, reading, with
  the 95% bootstrap intervals of metrics.json), the split of wrong answers into
  *retrieval misses* (no answer-bearing passage was read) and *reading misses*
  (one was read, another answer chosen), and a per-question browser: question,
  gold answers, the passages read (rank, retriever score, the reader's span in
  each, the predicted span and the gold answers highlighted), the chosen answer
  and its score.  Filters: wrong answers only, error kind, selector n.  Pages of
  25 questions are rendered on demand, so a full dev run (10,570 questions)
  opens and filters without freezing; filters can be preset in the address
  (``report.html#wrong=1&kind=retrieval&n=3``).
* the retrieval of a ``pipeline.run`` directory (:mod:`pipeline.report_retrieval`),
  the only browser of a retrieval-only run and a second one after the
  answers of a reader run: how many questions have their first gold passage
  at rank 1, 2-5, 6-10, 11-100, beyond or not within the depth, and per
  question its top passages (``--top``, default 10; texts from the dataset the
  manifest names, cut at ``--passage-chars``) with the gold ones marked and
  the gold passages not among them.  Filters: first gold not in run.trec,
  below rank k, a rank bucket, the article; preset in the address
  (``report.html#missed=1&k=5``).
* a ``pipeline.sweep`` directory: its tables (as ``pipeline.sweep_report``
  prints them) and its plots.

Values in the files are fractions; the report shows percent and says so.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
from pathlib import Path

from data.errors import UserError
from data.io import write_text
from pipeline.cli import main_guard, retrieval_levels

PAGE_SIZE = 25

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
mark.pred{background:#ffe08a}mark.gold{background:#b8f0b8}mark.pred.gold{background:#8fd6ff}
.q{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.q.right{border-left:6px solid #3a3}.q.retrieval{border-left:6px solid #c33}.q.reading{border-left:6px solid #e90}
.passage{margin:4px 0 4px 12px;padding:3px 6px;background:#fafafa}.passage.chosen{outline:2px solid #fc0}
.meta{color:#666;font-size:12px}#controls{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #eee}
img{max-width:100%;border:1px solid #eee}
"""

JS = r"""
const DATA = JSON.parse(document.getElementById('questions-data').textContent);
const PAGE = %(page)d;
let page = 0;
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));}
function spans(text, needles){
  const low = text.toLowerCase(); const marks = new Array(text.length).fill(0);
  needles.forEach(([needle, bit]) => { if(!needle) return; const n = needle.toLowerCase(); let i = low.indexOf(n);
    while(i >= 0){ for(let k=i;k<i+n.length;k++) marks[k] |= bit; i = low.indexOf(n, i + n.length); } });
  let out = '', cur = 0, buf = '';
  const flush = () => { if(!buf) return; if(cur===0) out += esc(buf); else out += '<mark class="' +
    [(cur&1)?'pred':'', (cur&2)?'gold':''].join(' ').trim() + '">' + esc(buf) + '</mark>'; buf=''; };
  for(let k=0;k<text.length;k++){ if(marks[k]!==cur){ flush(); cur=marks[k]; } buf += text[k]; }
  flush(); return out;
}
function kept(){
  const wrong = document.getElementById('f-wrong').checked, kind = document.getElementById('f-kind').value,
        n = document.getElementById('f-n').value;
  return DATA.filter(d => (!wrong || d.error) && (kind==='all' || d.error===kind) && (n==='all' || String(d.n)===n));
}
function render(){
  const rows = kept(), pages = Math.max(1, Math.ceil(rows.length / PAGE)); page = Math.min(page, pages - 1);
  document.getElementById('count').textContent = rows.length + ' questions, page ' + (page + 1) + ' of ' + pages;
  const html = rows.slice(page * PAGE, (page + 1) * PAGE).map(d => {
    const golds = d.gold.map(g => [g, 2]);
    const ps = (d.read || []).map(p => '<div class="passage' + (p.rank===d.answer_rank?' chosen':'') + '">' +
      '<span class="meta">#' + p.rank + ' · retriever ' + p.retriever_score.toFixed(3) + ' · reader ' + p.reader_score.toFixed(3) +
      (p.answer_bearing ? ' · answer-bearing' : '') + ' · span: “' + esc(p.span) + '”</span><br>' +
      spans(p.text, (p.rank===d.answer_rank ? [[d.answer, 1]] : []).concat(golds)) + '</div>').join('');
    const kind = d.error ? d.error : 'right';
    return '<div class="q ' + kind + '"><b>' + esc(d.question) + '</b> <span class="meta">' + esc(d.id) + ' · n ' + d.n +
      ' · ' + (d.error ? d.error + ' miss' : 'right') + '</span><br>answer: <mark class="pred">' + esc(d.answer || '∅') +
      '</mark> <span class="meta">(passage #' + d.answer_rank + ', reader score ' + (d.score===null?'-':d.score.toFixed(3)) +
      ', EM ' + (d.em ?? '-') + ', F1 ' + (d.f1===undefined||d.f1===null?'-':d.f1.toFixed(2)) + ')</span><br>gold: ' +
      d.gold.map(g => '<mark class="gold">' + esc(g) + '</mark>').join(' · ') + ps + '</div>';
  }).join('');
  document.getElementById('questions').innerHTML = html;
}
['f-wrong','f-kind','f-n'].forEach(id => document.getElementById(id).addEventListener('change', () => { page = 0; render(); }));
document.getElementById('prev').onclick = () => { page = Math.max(0, page - 1); render(); };
document.getElementById('next').onclick = () => { page += 1; render(); };
const ns = [...new Set(DATA.map(d => d.n))].sort((a,b)=>a-b);
document.getElementById('f-n').innerHTML = '<option value="all">all n</option>' + ns.map(n => '<option value="' + n + '">n = ' + n + '</option>').join('');
// filters can be preset in the address: report.html#wrong=1&kind=retrieval&n=3&page=2
const preset = new URLSearchParams(location.hash.slice(1));
if (preset.get('wrong') === '1') document.getElementById('f-wrong').checked = true;
if (preset.get('kind')) document.getElementById('f-kind').value = preset.get('kind');
if (preset.get('n')) document.getElementById('f-n').value = preset.get('n');
if (preset.get('page')) page = Math.max(0, parseInt(preset.get('page'), 10) - 1) || 0;
render();
"""


def _table(head: list[str], rows: list[list], table_id: str = "") -> str:
    ident = f' id="{table_id}"' if table_id else ""
    out = [f"<table{ident}><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    return "\n".join(out) + "</table>"


def _pct(v) -> str:
    return "" if v is None else f"{100 * float(v):.2f}"


def _ci(metrics: dict, key: str) -> str:
    ci = (metrics.get("ci95") or {}).get(key)
    return "" if not ci else f"[{_pct(ci[0])}, {_pct(ci[1])}]"


def run_tables(metrics: dict) -> str:
    """The metrics of a run as HTML tables (percent, with 95% bootstrap intervals)."""
    parts = []
    r = metrics["retrieval"]["reqa"]
    rows = []
    for level, label in retrieval_levels(metrics):
        for k, v in r[level].items():
            rows.append([f"{label} {k}", _pct(v), _ci(metrics, f"retrieval.reqa.{level}.{k}")])
    parts.append("<h2>Retrieval (ReQA; %)</h2>" + _table(["metric", "value (%)", "95% CI (%)"], rows, "retrieval-table")
                 + f"<p class=meta>{r['questions']} questions, {r['query_inputs']} query inputs, depth {r['depth']}, "
                   f"corpus {metrics['corpus_size']:,}</p>")
    if "beir" in metrics["retrieval"]:
        rows = [[k, _pct(v), _ci(metrics, f"retrieval.beir.{k}")] for k, v in metrics["retrieval"]["beir"].items()]
        parts.append("<h2>Retrieval (BEIR, pytrec_eval; %)</h2>" + _table(["metric", "value (%)", "95% CI (%)"], rows, "beir-table"))
    reading = metrics.get("reading")
    if reading:
        from eval.registry import answer_metric_names

        rows = [[k, _pct(reading[k]), _ci(metrics, f"reading.{k}")] for k in answer_metric_names() + ["answer_recall"]
                if k in reading]
        parts.append("<h2>Reading (%)</h2>" + _table(["metric", "value (%)", "95% CI (%)"], rows, "reading-table")
                     + f"<p class=meta>selector {html.escape(str(reading.get('selector')))}, mean n {reading.get('mean_n', 0):.2f}, "
                       f"reader {html.escape(str(reading.get('reader')))}</p>")
        info = reading.get("bert_f1_info")
        if info:
            parts.append(f"<p class=meta>BERT-F1: {html.escape(str(info.get('model')))} layer {info.get('num_layers')}, "
                         f"rescaled {info.get('rescale_with_baseline')}, bert-score {info.get('bert_score_version')}"
                         + (f" — {html.escape(info['note'])}" if info.get("note") else "") + "</p>")
        errors = reading.get("errors")
        if errors:
            parts.append("<h2>Wrong answers</h2>" + _table(
                ["kind", "share of questions (%)"],
                [["wrong (EM 0)", _pct(errors["wrong"])], ["retrieval misses (no answer-bearing passage read)", _pct(errors["retrieval_misses"])],
                 ["reading misses (an answer was read, another chosen)", _pct(errors["reading_misses"])]], "errors-table"))
    return "\n".join(parts)


def question_browser(details: list[dict]) -> str:
    data = json.dumps(details, ensure_ascii=False).replace("</", "<\\/")
    controls = ('<div id="controls"><label><input type="checkbox" id="f-wrong"> wrong answers only</label> '
                '<select id="f-kind"><option value="all">all errors</option><option value="retrieval">retrieval misses</option>'
                '<option value="reading">reading misses</option></select> <select id="f-n"></select> '
                '<button id="prev">◀ prev</button> <button id="next">next ▶</button> <span id="count"></span>'
                '<div class=meta><mark class="pred">predicted span</mark> <mark class="gold">gold answer</mark> '
                '<mark class="pred gold">both</mark>; framed passage: the one the answer came from</div></div>')
    return ("<h2>Questions</h2>" + controls + '<div id="questions"></div>'
            + f'<script type="application/json" id="questions-data">{data}</script>'
            + "<script>" + JS % {"page": PAGE_SIZE} + "</script>")


def _embed_png(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"><figcaption class=meta>{html.escape(path.name)}</figcaption></figure>'


def _markdown_tables(text: str) -> str:
    """The pipe tables ``pipeline.sweep_report`` prints, as HTML tables."""
    out = []
    for block in text.split("\n\n"):
        lines = [l for l in block.splitlines() if l.startswith("|")]
        if len(lines) < 2:
            continue
        cells = [[c.strip().strip("`") for c in l.strip("|").split("|")] for l in lines]
        out.append(_table(cells[0], cells[2:]))
    return "\n".join(out)


def sweep_plots(directory: Path, recorded) -> list[Path]:
    """The PNG plots of a sweep directory: those summary.json records, found under ``directory``.

    A sweep records them relative to its directory; older ones recorded them as written, relative to the working
    directory of the sweep (a relative ``--out``) or absolute (perhaps a directory since moved): a recorded path that
    is not there is found by its file name under ``directory``.  When none is found, every PNG in the directory.
    """
    found: list[Path] = []
    for entry in recorded:
        path = Path(str(entry))
        if path.suffix != ".png":
            continue
        # an absolute path: this directory's file of that name first (the recorded one may be of a copy's original)
        candidates = [directory / path.name, path] if path.is_absolute() else [directory / path, directory / path.name]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is not None and hit not in found:
            found.append(hit)
    return found or sorted(directory.glob("*.png"))


def sweep_body(directory: Path) -> str:
    from pipeline.sweep_report import report

    summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
    parts = [f"<p>{summary['questions']} questions, corpus sizes {', '.join(f'{s:,}' for s in summary['corpus_sizes'])}, "
             f"seeds {summary.get('seeds')}, n up to {summary['n_max']}</p>",
             "<h2>Tables (EM in %, regret in EM points)</h2>", _markdown_tables(report(directory))]
    pngs = sweep_plots(directory, summary.get("plots") or [])
    if pngs:
        parts.append("<h2>Plots</h2>" + "".join(_embed_png(p) for p in pngs))
    parts.append("<p class=meta>A sweep keeps per-level arrays, not per-question passages: "
                 "for the per-question browser, report a pipeline.run directory.</p>")
    return "\n".join(parts)


def retrieval_section(directory: Path, metrics: dict, *, top: int, chars: int, reader: bool, data_dir: str | None = None) -> str:
    """The retrieval browser of a run directory (:mod:`pipeline.report_retrieval`); a note when it has no run.trec/qrels."""
    from pipeline.report_retrieval import retrieval_browser, retrieval_data

    if top <= 0:
        return ""
    if not (directory / "run.trec").is_file() or not any((directory / q).is_file() for q in ("qrels.tsv", "qrels.trec")):
        return "<p class=meta>No run.trec and qrels in this directory: no retrieval browser.</p>"
    data = retrieval_data(directory, metrics, top=top, chars=chars, page_key="rpage" if reader else "page", data_dir=data_dir)
    title = "Retrieval: where the gold passages rank" + (" (the same questions, before reading)" if reader else "")
    return retrieval_browser(data, page_size=PAGE_SIZE, title=title)


def build_report(directory: str | Path, *, top: int = 10, passage_chars: int = 400, data_dir: str | None = None) -> str:
    """The HTML text of the report of a run or sweep directory (``top`` passages per question in the retrieval
    browser, 0: none; their texts cut at ``passage_chars``, from the dataset found under ``data_dir`` if given)."""
    from pipeline.report_retrieval import CSS as RETRIEVAL_CSS

    directory = Path(directory)
    if (directory / "summary.json").is_file():
        title, body = f"Sweep report: {directory.name}", sweep_body(directory)
    elif (directory / "metrics.json").is_file():
        try:
            metrics = json.loads((directory / "metrics.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{directory / 'metrics.json'}:{e.lineno}: not valid JSON ({e.msg})") from None
        title = f"Run report: {metrics.get('dataset')} {metrics.get('split')} / {metrics.get('retriever')}"
        body = run_tables(metrics)
        details_path = directory / "details.jsonl"
        if details_path.is_file():
            details = []
            for n, line in enumerate(details_path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    details.append(json.loads(line))
                except json.JSONDecodeError:
                    raise UserError(f"{details_path}:{n}: not valid JSON") from None
            body += question_browser(details)
            body += retrieval_section(directory, metrics, top=top, chars=passage_chars, reader=True, data_dir=data_dir)
        else:
            body += "<p class=meta>Retrieval-only run: no answers to browse (run with --reader).</p>"
            body += retrieval_section(directory, metrics, top=top, chars=passage_chars, reader=False, data_dir=data_dir)
    else:
        raise UserError(f"{directory}: neither a pipeline.run directory (metrics.json) nor a sweep (summary.json)")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{CSS}{RETRIEVAL_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p class=meta>{html.escape(str(directory.resolve()))}; values in percent</p>{body}</body></html>\n")


@main_guard
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__.splitlines()[0])
    p.add_argument("directory", help="a pipeline.run or pipeline.sweep --out directory")
    p.add_argument("--out", help="HTML file to write (default: DIRECTORY/report.html)")
    p.add_argument("--top", type=int, default=10, help="passages shown per question in the retrieval browser "
                   "(default: 10; 0: no retrieval browser)")
    p.add_argument("--passage-chars", type=int, default=400, help="characters kept of each passage's text in the "
                   "retrieval browser (default: 400)")
    p.add_argument("--data-dir", help="where the run's dataset is, for the passages' texts (default: the run's --data-dir, "
                   "else the search order of --data-dir in python -m pipeline.run --help)")
    args = p.parse_args(argv)
    if args.passage_chars < 1:
        raise UserError(f"--passage-chars {args.passage_chars}: must be >= 1")
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory")
    out = Path(args.out) if args.out else directory / "report.html"
    write_text(out, build_report(directory, top=args.top, passage_chars=args.passage_chars, data_dir=args.data_dir))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
