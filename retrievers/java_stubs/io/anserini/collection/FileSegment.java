// Compile-time stand-in for Anserini's class (see SourceDocument.java): the members our collection uses.
package io.anserini.collection;

import java.io.BufferedReader;
import java.io.Closeable;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Iterator;

public abstract class FileSegment<T extends SourceDocument> implements Iterable<T>, Closeable {
  protected Path path;
  protected BufferedReader bufferedReader;
  protected boolean atEOF;
  protected T bufferedRecord;
  protected int skipped;
  protected boolean error;

  public FileSegment(Path path) {}

  public FileSegment(BufferedReader reader) {}

  public void close() {}

  protected abstract void readNext() throws IOException, java.text.ParseException, java.util.NoSuchElementException;

  public final Iterator<T> iterator() {
    throw new UnsupportedOperationException();
  }
}
