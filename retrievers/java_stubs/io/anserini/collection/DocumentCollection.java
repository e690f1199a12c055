// Compile-time stand-in for Anserini's class (see SourceDocument.java): the members our collection uses.
package io.anserini.collection;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.Set;

public abstract class DocumentCollection<T extends SourceDocument> implements Iterable<FileSegment<T>> {
  protected Path path;
  protected Set<String> allowedFileSuffix;

  public DocumentCollection() {}

  public abstract FileSegment<T> createFileSegment(Path p) throws IOException;

  public abstract FileSegment<T> createFileSegment(BufferedReader reader) throws IOException;

  public final Iterator<FileSegment<T>> iterator() {
    throw new UnsupportedOperationException();
  }
}
