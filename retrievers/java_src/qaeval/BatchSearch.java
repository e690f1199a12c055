/*
 * Batch BM25 search over a Lucene/Anserini index that returns primitive arrays.
 *
 * It runs exactly the search Anserini 1.7's SimpleSearcher.batch_search runs
 * (io.anserini.search.SimpleSearcher#_search): the query built by the caller's
 * Anserini QueryGenerator from the caller's Analyzer on the "contents" field,
 * IndexSearcher.search(query, k, Sort(score, id STRING_VAL), doDocScores=true) -- computed the cheaper
 * way described at TopByScoreThenRank, with the same result; from k = TERM_AT_A_TIME_FROM_K a bag-of-words query
 * is scored by TermAtATime instead of Lucene's MaxScore, again with the same scores --
 * (plain search(query, k) for Lucene 8 indexes, like Anserini), then Anserini's
 * own ScoreTiesAdjusterReranker (called by reflection) on the scores.  What it
 * leaves out is what costs at depth: loading the stored document of every hit
 * and handing one Java object per hit to Python.  Lucene doc ids are mapped to
 * corpus rows through an int[] built once from the index's "id" field; a batch's
 * rows and scores are written to one little-endian file that numpy reads.
 *
 * Compiled against the Lucene classes of Pyserini's Anserini fat jar only
 * (javac --release 17); Anserini classes are reached by reflection because
 * they are Java 21 class files.
 */
package qaeval;

import java.io.Closeable;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.index.BinaryDocValues;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.NumericDocValues;
import org.apache.lucene.index.PostingsEnum;
import org.apache.lucene.index.StoredFields;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.TermState;
import org.apache.lucene.index.TermStates;
import org.apache.lucene.index.TermsEnum;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.BoostQuery;
import org.apache.lucene.search.CollectionStatistics;
import org.apache.lucene.search.Collector;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.LeafCollector;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Scorable;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.ScoreMode;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TermStatistics;
import org.apache.lucene.search.similarities.Similarity;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.BytesRef;
import org.apache.lucene.util.IntroSorter;

public final class BatchSearch implements Closeable {
  public static final int VERSION = 5;
  private static final String ID = "id";          // io.anserini.index.Constants.ID
  private static final String CONTENTS = "contents"; // io.anserini.index.Constants.CONTENTS

  private final DirectoryReader reader;
  private final IndexSearcher searcher;
  private final boolean tieBreakById;
  private final Analyzer analyzer;
  private final Object generator;
  private final Method buildQuery;
  private final Object tiesAdjuster;
  private final Method rerank;
  private final Class<?> scoredDocsClass;
  private final Field sdDocids, sdLuceneDocids, sdDocuments, sdScores;
  private int[] rows = null;

  public BatchSearch(String indexDir, Similarity similarity, Analyzer analyzer, Object generator) throws Exception {
    this.reader = DirectoryReader.open(FSDirectory.open(Paths.get(indexDir)));
    // SimpleSearcher: "If we detect an older index version, we turn off consistent tie-breaking"
    this.tieBreakById = reader.toString().contains("lucene.version=9");
    this.searcher = new IndexSearcher(reader);
    this.searcher.setSimilarity(similarity);
    this.analyzer = analyzer;
    this.generator = generator;
    this.buildQuery = generator.getClass().getMethod("buildQuery", String.class, Analyzer.class, String.class);
    Class<?> adjuster = Class.forName("io.anserini.rerank.lib.ScoreTiesAdjusterReranker");
    this.tiesAdjuster = adjuster.getConstructor().newInstance();
    this.scoredDocsClass = Class.forName("io.anserini.search.ScoredDocs");
    this.rerank = adjuster.getMethod("rerank", scoredDocsClass, Class.forName("io.anserini.rerank.RerankerContext"));
    this.sdDocids = scoredDocsClass.getField("docids");
    this.sdLuceneDocids = scoredDocsClass.getField("lucene_docids");
    this.sdDocuments = scoredDocsClass.getField("lucene_documents");
    this.sdScores = scoredDocsClass.getField("scores");
  }

  public int maxDoc() { return reader.maxDoc(); }
  public int numDocs() { return reader.numDocs(); }
  public boolean tieBreakById() { return tieBreakById; }
  public static int version() { return VERSION; }

  /** Receives the "id" of each live Lucene doc, in doc order (bytes valid only during the call). */
  private interface IdVisitor {
    void visit(int luceneDoc, byte[] bytes, int offset, int length) throws IOException;
  }

  /** Visits every live doc's "id" (binary doc values, else the stored field), without a String per doc. */
  private void visitIds(IdVisitor visitor) throws IOException {
    for (LeafReaderContext leaf : reader.leaves()) {
      LeafReader r = leaf.reader();
      BinaryDocValues dv = r.getBinaryDocValues(ID);
      StoredFields stored = null;
      for (int d = 0; d < r.maxDoc(); d++) {
        if (r.getLiveDocs() != null && !r.getLiveDocs().get(d)) continue;
        if (dv != null && dv.docID() < d && dv.advanceExact(d)) {
          BytesRef b = dv.binaryValue();
          visitor.visit(leaf.docBase + d, b.bytes, b.offset, b.length);
          continue;
        }
        if (stored == null) stored = r.storedFields();
        String id = stored.document(d, Set.of(ID)).get(ID);
        if (id == null) continue;
        byte[] b = id.getBytes(StandardCharsets.UTF_8);
        visitor.visit(leaf.docBase + d, b, 0, b.length);
      }
    }
  }

  /** Rows = the ids read as integers (indexes whose ids are corpus row numbers); returns how many are not. */
  public int mapNumericIds(int corpusSize) throws IOException {
    final int[] map = new int[reader.maxDoc()];
    java.util.Arrays.fill(map, -1);
    final int[] bad = new int[1];
    visitIds((doc, bytes, off, len) -> {
      long v = 0;
      boolean ok = len > 0 && len <= 10 && !(len > 1 && bytes[off] == '0');
      for (int i = 0; ok && i < len; i++) {
        int c = bytes[off + i] - '0';
        if (c < 0 || c > 9) ok = false; else v = v * 10 + c;
      }
      if (ok && v < corpusSize) map[doc] = (int) v; else bad[0]++;
    });
    this.rows = map;
    return bad[0];
  }

  /** Writes every Lucene doc's id, UTF-8, one per line (empty line for a deleted doc), to path. */
  public int writeIds(String path) throws IOException {
    final int[] next = new int[1];
    try (java.io.OutputStream out = new java.io.BufferedOutputStream(Files.newOutputStream(Paths.get(path)), 1 << 20)) {
      visitIds((doc, bytes, off, len) -> {
        for (; next[0] < doc; next[0]++) out.write('\n');
        for (int i = 0; i < len; i++) {
          byte c = bytes[off + i];
          out.write(c == '\n' ? ' ' : c);
        }
        out.write('\n');
        next[0] = doc + 1;
      });
      for (; next[0] < reader.maxDoc(); next[0]++) out.write('\n');
    }
    return reader.maxDoc();
  }

  /** Reads the Lucene-doc -> corpus-row map (int32 little-endian, maxDoc entries, -1 = not in the corpus). */
  public void setRows(String path) throws IOException {
    byte[] bytes = Files.readAllBytes(Paths.get(path));
    int n = bytes.length / 4;
    if (n != reader.maxDoc()) throw new IllegalArgumentException("row map has " + n + " entries, index has " + reader.maxDoc());
    int[] map = new int[n];
    ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(map);
    this.rows = map;
  }

  private volatile int[] idRanks = null;
  private volatile double idOrderSeconds = 0;

  /** How long computing the ids' order took (once per index, at the first search; 0 before). */
  public double idOrderSeconds() { return idOrderSeconds; }

  /**
   * Each Lucene doc's position in the order of Lucene's (id STRING_VAL) sort field: the "id" doc value's bytes,
   * unsigned, a doc without one first, equal ids by Lucene doc.  Computed once per index (a sort of the ids), so
   * breaking a score tie by id compares two ints instead of reading and copying doc values per query.
   */
  private int[] idRanks() throws IOException {
    int[] r = idRanks;
    if (r != null) return r;
    synchronized (this) {
      if (idRanks != null) return idRanks;
      final long t0 = System.nanoTime();
      final int maxDoc = reader.maxDoc();
      final int[] start = new int[maxDoc + 1];
      final long[] prefix = new long[maxDoc];
      byte[] pool = new byte[(int) Math.min(1 << 30, Math.max(16L, 8L * maxDoc))];  // grown below if ids are longer
      int used = 0;
      for (LeafReaderContext leaf : reader.leaves()) {
        BinaryDocValues dv = leaf.reader().getBinaryDocValues(ID);
        for (int d = 0; d < leaf.reader().maxDoc(); d++) {
          int doc = leaf.docBase + d;
          start[doc] = used;
          if (dv == null || !dv.advanceExact(d)) continue;
          BytesRef b = dv.binaryValue();
          if (used + b.length > pool.length) pool = java.util.Arrays.copyOf(pool, Math.max(pool.length * 2, used + b.length));
          System.arraycopy(b.bytes, b.offset, pool, used, b.length);
          long p = 0;  // the first 8 bytes, big-endian, zero-padded: unsigned order = byte order of the prefix
          for (int i = 0; i < 8; i++) p = (p << 8) | (i < b.length ? (b.bytes[b.offset + i] & 0xFF) : 0);
          prefix[doc] = p;
          used += b.length;
        }
      }
      start[maxDoc] = used;
      final byte[] bytes = pool;
      final int[] perm = new int[maxDoc];
      for (int i = 0; i < maxDoc; i++) perm[i] = i;
      new IntroSorter() {
        private int pivot;
        @Override protected void swap(int i, int j) { int t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        @Override protected void setPivot(int i) { pivot = perm[i]; }
        @Override protected int comparePivot(int j) { return compareIds(pivot, perm[j]); }
        @Override protected int compare(int i, int j) { return compareIds(perm[i], perm[j]); }
        private int compareIds(int a, int b) {
          int c = Long.compareUnsigned(prefix[a], prefix[b]);
          if (c != 0) return c;
          int la = start[a + 1] - start[a], lb = start[b + 1] - start[b];
          if (la > 8 || lb > 8) {
            c = java.util.Arrays.compareUnsigned(bytes, start[a], start[a + 1], bytes, start[b], start[b + 1]);
            if (c != 0) return c;
          } else if (la != lb) {
            return Integer.compare(la, lb);  // equal zero-padded prefixes: the shorter id is a prefix of the longer
          }
          return Integer.compare(a, b);
        }
      }.sort(0, maxDoc);
      int[] ranks = new int[maxDoc];
      for (int i = 0; i < maxDoc; i++) ranks[perm[i]] = i;
      idOrderSeconds = (System.nanoTime() - t0) / 1e9;
      idRanks = ranks;
      return ranks;
    }
  }

  private Query build(String q) throws Exception {
    return (Query) buildQuery.invoke(generator, CONTENTS, analyzer, q);
  }

  /** Anserini's ScoreTiesAdjusterReranker on one query's scores (in place). */
  private void adjustTies(int[] docs, float[] scores) throws Exception {
    Object sd = scoredDocsClass.getConstructor().newInstance();
    sdDocids.set(sd, new String[docs.length]);
    sdLuceneDocids.set(sd, docs);
    sdDocuments.set(sd, new Document[docs.length]);
    sdScores.set(sd, scores);
    Object out = rerank.invoke(tiesAdjuster, sd, null);
    float[] adjusted = (float[]) sdScores.get(out);
    if (adjusted != scores) System.arraycopy(adjusted, 0, scores, 0, scores.length);
  }

  /**
   * The top k by (score desc, "id" asc, Lucene doc asc): what search(query, k, Sort(score, id STRING_VAL), true)
   * returns, in one pass with Lucene's dynamic pruning (MaxScore / WAND / block-max) at the final threshold.
   *
   * That sort's TopFieldCollector copies each competitive hit's id doc value into its queue and compares the
   * bytes whenever scores tie; this collector keeps (score, doc) in primitive arrays and breaks a tie by the ids'
   * precomputed order (idRanks: one int compare).  Once k hits are held it tells the scorer the k-th score
   * itself (not the next float up, as Lucene's score-only collector does: a later doc with an equal score may
   * still win on id), so only docs scoring below it are skipped -- exactly the docs the field sort cannot keep.
   */
  static final class TopByScoreThenRank implements Collector {
    private final int k;
    private final int[] ranks;
    // a binary min-heap of the hits held, worst at 0: lower score, or equal score and later in id order
    private final float[] scores;
    private final int[] docs;
    private int size = 0;

    TopByScoreThenRank(int k, int[] ranks) {
      this.k = k;
      this.ranks = ranks;
      this.scores = new float[k];
      this.docs = new int[k];
    }

    /** Whether hit (sa, da) ranks below hit (sb, db). */
    private boolean worse(float sa, int da, float sb, int db) {
      return sa < sb || (sa == sb && ranks[da] > ranks[db]);  // ranks are distinct: equal ids by Lucene doc
    }

    private void siftUp(int i) {
      float s = scores[i];
      int d = docs[i];
      while (i > 0) {
        int parent = (i - 1) >>> 1;
        if (!worse(s, d, scores[parent], docs[parent])) break;
        scores[i] = scores[parent];
        docs[i] = docs[parent];
        i = parent;
      }
      scores[i] = s;
      docs[i] = d;
    }

    private void siftDown(int i) {
      float s = scores[i];
      int d = docs[i];
      while (true) {
        int c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && worse(scores[c + 1], docs[c + 1], scores[c], docs[c])) c++;
        if (!worse(scores[c], docs[c], s, d)) break;
        scores[i] = scores[c];
        docs[i] = docs[c];
        i = c;
      }
      scores[i] = s;
      docs[i] = d;
    }

    @Override
    public ScoreMode scoreMode() { return ScoreMode.TOP_SCORES; }

    @Override
    public LeafCollector getLeafCollector(LeafReaderContext context) {
      final int docBase = context.docBase;
      return new LeafCollector() {
        private Scorable scorer;
        private float minSet = Float.NEGATIVE_INFINITY;

        private void raise() throws IOException {
          if (size == k && scores[0] > minSet) {
            minSet = scores[0];
            scorer.setMinCompetitiveScore(minSet);
          }
        }

        @Override
        public void setScorer(Scorable s) throws IOException {
          scorer = s;
          raise();
        }

        @Override
        public void collect(int doc) throws IOException {
          if (offer(scorer.score(), docBase + doc)) raise();
        }
      };
    }

    /** Keeps hit (score, d) if it is among the best k so far; returns whether the held hits changed. */
    boolean offer(float score, int d) {
      if (size < k) {
        scores[size] = score;
        docs[size] = d;
        siftUp(size++);
        return true;
      }
      if (worse(scores[0], docs[0], score, d)) {
        scores[0] = score;
        docs[0] = d;
        siftDown(0);
        return true;
      }
      return false;
    }

    /** Sorts the hits held best first, in place (a heap sort: the worst popped to the end), and returns how many. */
    int sortBestFirst() {
      final int n = size;
      while (size > 1) {
        size--;
        float s = scores[0]; scores[0] = scores[size]; scores[size] = s;
        int d = docs[0]; docs[0] = docs[size]; docs[size] = d;
        siftDown(0);
      }
      size = 0;
      return n;
    }
  }

  /** One clause of a pure disjunction of terms: the term, its Lucene statistics and Lucene's scorer for it. */
  static final class TermClause {
    final Term term;
    final TermStates states;
    final Similarity.SimScorer sim;

    TermClause(Term term, TermStates states, Similarity.SimScorer sim) {
      this.term = term;
      this.states = states;
      this.sim = sim;
    }
  }

  /**
   * The clauses of query if, rewritten, it is a pure disjunction of term queries on CONTENTS (Anserini's bag of
   * words: SHOULD clauses of TermQuery, each boosted by its count), each with the SimScorer Lucene's TermWeight
   * builds for it (the searcher's similarity, the boost, the index-wide collection and term statistics); null for
   * any other query, which Lucene's own scorers then run.
   */
  private TermClause[] termClauses(Query query) throws IOException {
    Query q = searcher.rewrite(query);
    List<Query> parts = new ArrayList<>();
    if (q instanceof BooleanQuery) {
      BooleanQuery bq = (BooleanQuery) q;
      if (bq.getMinimumNumberShouldMatch() != 0) return null;
      for (BooleanClause c : bq.clauses()) {
        if (c.getOccur() != BooleanClause.Occur.SHOULD) return null;
        parts.add(c.getQuery());
      }
    } else {
      parts.add(q);
    }
    TermClause[] out = new TermClause[parts.size()];
    for (int i = 0; i < out.length; i++) {
      Query p = parts.get(i);
      float boost = 1f;
      if (p instanceof BoostQuery) {
        boost = ((BoostQuery) p).getBoost();
        p = ((BoostQuery) p).getQuery();
      }
      // a zero or negative boost could give a doc a score of 0, which the accumulator reads as "not seen"
      if (!(p instanceof TermQuery) || !(boost > 0f) || Float.isInfinite(boost)) return null;
      Term term = ((TermQuery) p).getTerm();
      if (!CONTENTS.equals(term.field())) return null;  // the field whose norms are loaded
      TermStates states = TermStates.build(searcher, term, true);
      if (states.docFreq() == 0) { out[i] = new TermClause(term, states, null); continue; }  // matches nothing
      CollectionStatistics cs = searcher.collectionStatistics(term.field());
      if (cs == null) return null;
      TermStatistics ts = searcher.termStatistics(term, states.docFreq(), states.totalTermFreq());
      out[i] = new TermClause(term, states, searcher.getSimilarity().scorer(boost, cs, ts));
    }
    return contentsNorms() != null ? out : null;
  }

  private static final byte[][] NORMS_DO_NOT_FIT = new byte[0][];
  private volatile byte[][] leafNorms = null;  // per leaf (by ord): every doc's norm of CONTENTS; null entry: none

  /**
   * The norms of CONTENTS for every leaf as byte arrays (loaded once; one byte per doc), which is what LeafSimScorer
   * reads through NumericDocValues per doc; null if a norm does not fit in a byte (no Similarity here does that;
   * Lucene's own scorers then run every query).
   */
  private byte[][] contentsNorms() throws IOException {
    byte[][] all = leafNorms;
    if (all == null) {
      synchronized (this) {
        all = leafNorms;
        if (all == null) {
          all = new byte[reader.leaves().size()][];
          outer:
          for (LeafReaderContext leaf : reader.leaves()) {
            NumericDocValues nv = leaf.reader().getNormValues(CONTENTS);
            if (nv == null) continue;  // LeafSimScorer: norm 1 for every doc
            byte[] b = new byte[leaf.reader().maxDoc()];
            for (int d = nv.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = nv.nextDoc()) {
              long v = nv.longValue();
              if (v != (byte) v) { all = NORMS_DO_NOT_FIT; break outer; }
              b[d] = (byte) v;
            }
            all[leaf.ord] = b;
          }
          leafNorms = all;
        }
      }
    }
    return all == NORMS_DO_NOT_FIT ? null : all;
  }

  /**
   * Scores a pure disjunction of terms term at a time over windows of docs (the accumulator layout of Lucene's
   * BooleanScorer, in primitive arrays): for each window, each term's postings add Lucene's score for the term to
   * the doc's double sum -- the sum Lucene's BooleanScorer and MaxScoreBulkScorer keep, rounded to float the same
   * way -- then every doc touched in the window is offered to the top-k collector.  No pruning: at depth 1000
   * Lucene's MaxScore skips little, and this loop does far less per posting than Lucene's doc-at-a-time scorers.
   */
  static final class TermAtATime {
    static final int WINDOW = 1 << 15;
    private final double[] acc = new double[WINDOW];
    private final int[] touched = new int[WINDOW];

    void score(LeafReaderContext leaf, byte[] norms, TermClause[] clauses, TopByScoreThenRank top) throws IOException {
      LeafReader r = leaf.reader();
      int n = 0;
      PostingsEnum[] postings = new PostingsEnum[clauses.length];
      Similarity.SimScorer[] sims = new Similarity.SimScorer[clauses.length];
      for (TermClause c : clauses) {
        if (c.sim == null) continue;
        TermState state = c.states.get(leaf);
        if (state == null) continue;
        TermsEnum te = r.terms(c.term.field()).iterator();
        te.seekExact(c.term.bytes(), state);
        postings[n] = te.postings(null, PostingsEnum.FREQS);
        sims[n] = c.sim;
        n++;
      }
      if (n == 0) return;
      final int[] cur = new int[n];
      for (int c = 0; c < n; c++) cur[c] = postings[c].nextDoc();
      final Bits live = r.getLiveDocs();
      final int maxDoc = r.maxDoc();
      final int docBase = leaf.docBase;
      final double[] acc = this.acc;
      final int[] touched = this.touched;
      for (int base = 0; base < maxDoc; base += WINDOW) {
        final int end = Math.min(maxDoc, base + WINDOW);
        int nt = 0;
        for (int c = 0; c < n; c++) {
          final PostingsEnum pe = postings[c];
          final Similarity.SimScorer sim = sims[c];
          int doc = cur[c];
          while (doc < end) {
            final int i = doc - base;
            final double s = sim.score(pe.freq(), norms == null ? 1L : norms[doc]);
            if (acc[i] == 0.0) touched[nt++] = i;
            acc[i] += s;
            doc = pe.nextDoc();
          }
          cur[c] = doc;
        }
        for (int t = 0; t < nt; t++) {
          final int i = touched[t];
          final float score = (float) acc[i];
          acc[i] = 0.0;
          if (live == null || live.get(base + i)) top.offer(score, docBase + base + i);
        }
      }
    }
  }

  /**
   * The depth from which pure term disjunctions run TermAtATime: at 1M passages and k = 1000 it ran 1.2-1.3x the
   * queries/s of Lucene's MaxScore (2 threads, identical rankings), at k = 10..300 MaxScore's pruning wins.
   */
  public static final int TERM_AT_A_TIME_FROM_K = 1000;

  private volatile int termAtATimeFromK = TERM_AT_A_TIME_FROM_K;

  /** Runs pure disjunctions of terms term at a time (TermAtATime) when k is at least fromK (MAX_VALUE: never). */
  public void setTermAtATimeFromK(int fromK) { termAtATimeFromK = fromK; }

  public int termAtATimeFromK() { return termAtATimeFromK; }

  /**
   * Searches every query for its top k, with a pool of threads.  Writes to outPath
   * Q*k int32 corpus rows (-1 past the last hit; hits on docs not in the corpus are dropped), then Q*k float32
   * scores (-inf past the last hit), little-endian.  Returns the number of hits.
   */
  public long search(String[] queries, int k, int threads, String outPath) throws Exception {
    final int nq = queries.length;
    final int[] outRows = new int[nq * k];
    final float[] outScores = new float[nq * k];
    java.util.Arrays.fill(outRows, -1);
    java.util.Arrays.fill(outScores, Float.NEGATIVE_INFINITY);
    final int[] map = rows;
    if (map == null) throw new IllegalStateException("no row map: call mapNumericIds or setRows first");
    final AtomicInteger next = new AtomicInteger();
    final long[] hits = new long[Math.max(1, threads)];
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
    try {
      List<Future<?>> futures = new ArrayList<>();
      for (int t = 0; t < Math.max(1, threads); t++) {
        final int slot = t;
        futures.add(pool.submit(() -> {
          TermAtATime taat = new TermAtATime();
          for (int i = next.getAndIncrement(); i < nq; i = next.getAndIncrement()) {
            Query query = build(queries[i]);
            int[] docs;
            float[] scores;
            TermClause[] clauses = tieBreakById && k >= termAtATimeFromK ? termClauses(query) : null;
            if (tieBreakById) {
              TopByScoreThenRank top = new TopByScoreThenRank(Math.min(k, Math.max(1, reader.maxDoc())), idRanks());
              if (clauses != null) {
                byte[][] norms = contentsNorms();
                for (LeafReaderContext leaf : reader.leaves()) taat.score(leaf, norms[leaf.ord], clauses, top);
              } else {
                searcher.search(query, top);
              }
              int n = top.sortBestFirst();
              docs = n == top.docs.length ? top.docs : java.util.Arrays.copyOf(top.docs, n);
              scores = n == top.scores.length ? top.scores : java.util.Arrays.copyOf(top.scores, n);
            } else {
              ScoreDoc[] sds = searcher.search(query, k).scoreDocs;
              docs = new int[sds.length];
              scores = new float[sds.length];
              for (int j = 0; j < sds.length; j++) { docs[j] = sds[j].doc; scores[j] = sds[j].score; }
            }
            int n = docs.length;
            adjustTies(docs, scores);
            int base = i * k;
            int w = 0;  // hits on docs outside the corpus (row -1) are dropped
            for (int j = 0; j < n; j++) {
              int row = map[docs[j]];
              if (row < 0) continue;
              outRows[base + w] = row;
              outScores[base + w] = scores[j];
              w++;
            }
            hits[slot] += w;
          }
          return null;
        }));
      }
      for (Future<?> f : futures) f.get();
    } finally {
      pool.shutdown();
    }
    ByteBuffer buf = ByteBuffer.allocate(nq * k * 8).order(ByteOrder.LITTLE_ENDIAN);
    buf.asIntBuffer().put(outRows);
    buf.position(nq * k * 4);
    buf.slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().put(outScores);
    buf.position(0);
    try (FileChannel ch = FileChannel.open(Paths.get(outPath), StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
      while (buf.hasRemaining()) ch.write(buf);
    }
    long total = 0;
    for (long h : hits) total += h;
    return total;
  }

  @Override
  public void close() throws IOException { reader.close(); }
}
