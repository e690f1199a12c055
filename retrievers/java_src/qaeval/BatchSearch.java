/*
 * Batch BM25 search over a Lucene/Anserini index that returns primitive arrays.
 *
 * It runs exactly the search Anserini 1.7's SimpleSearcher.batch_search runs
 * (io.anserini.search.SimpleSearcher#_search): the query built by the caller's
 * Anserini QueryGenerator from the caller's Analyzer on the "contents" field,
 * IndexSearcher.search(query, k, Sort(score, id STRING_VAL), doDocScores=true) -- computed the cheaper
 * way described at TopByScoreThenRank, with the same result --
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
import org.apache.lucene.index.StoredFields;
import org.apache.lucene.search.Collector;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.LeafCollector;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Scorable;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.ScoreMode;
import org.apache.lucene.search.similarities.Similarity;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;
import org.apache.lucene.util.IntroSorter;

public final class BatchSearch implements Closeable {
  public static final int VERSION = 4;
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
          float score = scorer.score();
          int d = docBase + doc;
          if (size < k) {
            scores[size] = score;
            docs[size] = d;
            siftUp(size++);
            raise();
          } else if (worse(scores[0], docs[0], score, d)) {
            scores[0] = score;
            docs[0] = d;
            siftDown(0);
            raise();
          }
        }
      };
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
          for (int i = next.getAndIncrement(); i < nq; i = next.getAndIncrement()) {
            Query query = build(queries[i]);
            int[] docs;
            float[] scores;
            if (tieBreakById) {
              TopByScoreThenRank top = new TopByScoreThenRank(Math.min(k, Math.max(1, reader.maxDoc())), idRanks());
              searcher.search(query, top);
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
