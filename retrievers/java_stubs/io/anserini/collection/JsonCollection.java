// Compile-time stand-in for Anserini's class (see SourceDocument.java): the members our collection uses.
package io.anserini.collection;

import java.io.IOException;
import java.nio.file.Path;

public class JsonCollection {
  public static class Document implements SourceDocument {
    public String id() { return null; }

    public String contents() { return null; }

    public String raw() { return null; }

    public boolean indexable() { return true; }
  }

  public static class Segment<T extends Document> extends FileSegment<T> {
    public Segment(Path path) throws IOException {
      super(path);
    }

    protected void readNext() {}
  }
}
