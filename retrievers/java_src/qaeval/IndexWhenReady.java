/*
 * Starts Anserini's IndexCollection only when its input is ready.
 *
 * The parent process starts this JVM first, then writes the input files, then sends "go" on stdin;
 * meanwhile the JVM starts and loads the indexer's classes, so the JVM's start-up overlaps the writing instead
 * of following it.  Anything else on stdin (or its end: the parent died or gave up) exits without indexing.
 */
package qaeval;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;

public final class IndexWhenReady {
  private static final String[] PRELOAD = {
    "org.apache.lucene.index.IndexWriter", "org.apache.lucene.document.Document",
    "io.anserini.collection.JsonCollection", "io.anserini.collection.RowTextCollection",
    "io.anserini.index.generator.DefaultLuceneDocumentGenerator",
    "io.anserini.analysis.DefaultEnglishAnalyzer",
  };

  private IndexWhenReady() {}

  public static void main(String[] args) throws Throwable {
    ClassLoader loader = IndexWhenReady.class.getClassLoader();
    Method main = Class.forName("io.anserini.index.IndexCollection", true, loader).getMethod("main", String[].class);
    for (String name : PRELOAD) {
      try {
        Class.forName(name, true, loader);
      } catch (ClassNotFoundException e) {
        // a class moved in another Anserini version: only the head start is lost
      }
    }
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line = in.readLine();
    if (!"go".equals(line)) {
      System.err.println("IndexWhenReady: no go from the parent; not indexing");
      System.exit(3);
    }
    try {
      main.invoke(null, (Object) args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }
}
