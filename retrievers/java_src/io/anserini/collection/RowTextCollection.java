/*
 * Anserini collection of the binary "row text" files our index build writes (retrievers/lucene.py).
 *
 * A file holds the texts of consecutive corpus rows: their UTF-8 bytes back to back, then the n + 1 byte offsets
 * of the texts (little-endian int64, the first 0), then a 24-byte trailer: first row (int64), n (int64) and the
 * magic "QAROWS01".  Document i of a file gets the id first + i (the corpus row, as in our JSONL shards) and the
 * text as its contents.  Python writes these files straight from the corpus store's Arrow buffers, so no
 * per-document JSON is encoded there nor parsed here; everything after the document (the generator, analyzer and
 * IndexWriter) is Anserini's own, so the index is the one JsonCollection shards of the same texts give.
 *
 * A chunk of texts that UTF-8 cannot encode (a lone surrogate, which JSON can escape) is written as a JsonCollection
 * ".jsonl" file instead, read here by JsonCollection's own segment.
 *
 * A ".slices" file instead points into a corpus store's Arrow file (data/corpus_store.py, CorpusStore.file_slices):
 * magic "QASLICE1", the store file's path (int32 length + UTF-8), the number of entries (int64), then per entry
 * nine int64: first row, first index in the batch, count, and the byte positions of the batch's title offsets
 * (int32), title data and its length, text offsets, text data and its length (title positions -1: no title).
 * Document first + i gets "title\ntext" (the text alone where the title is empty), as the store's "contents" column
 * reads, straight from the memory-mapped file: the corpus is not written out again for the index.
 *
 * It lives in Anserini's collection package because IndexCollection resolves "-collection NAME" there.
 */
package io.anserini.collection;

import java.io.BufferedInputStream;
import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.NoSuchElementException;
import java.util.Set;

public class RowTextCollection extends DocumentCollection<SourceDocument> {
  static final String SUFFIX = ".rows";
  static final String SLICES = ".slices";
  static final String JSONL = ".jsonl";
  static final byte[] MAGIC = "QAROWS01".getBytes(StandardCharsets.US_ASCII);
  static final int TRAILER = 24;

  public RowTextCollection(Path path) {
    this.path = path;
    this.allowedFileSuffix = Set.of(SUFFIX, SLICES, JSONL);
  }

  public RowTextCollection() {
    this.allowedFileSuffix = Set.of(SUFFIX, SLICES, JSONL);
  }

  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public FileSegment<SourceDocument> createFileSegment(Path p) throws IOException {
    if (p.getFileName().toString().endsWith(JSONL)) {
      return (FileSegment) new JsonCollection.Segment<JsonCollection.Document>(p);
    }
    if (p.getFileName().toString().endsWith(SLICES)) {
      return new SliceSegment(p);
    }
    return new Segment(p);
  }

  @Override
  public FileSegment<SourceDocument> createFileSegment(BufferedReader reader) {
    throw new UnsupportedOperationException("row text files are binary: open them by path");
  }

  /** One file: the offsets are read from its end, the texts streamed from its start. */
  public static final class Segment extends FileSegment<SourceDocument> {
    private final long first;
    private final long[] offsets;
    private final InputStream in;
    private int next;
    private byte[] buffer = new byte[1 << 12];

    Segment(Path p) throws IOException {
      super(p);
      try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ)) {
        long size = ch.size();
        if (size < TRAILER) {
          throw new IOException(p + ": not a row text file (" + size + " bytes)");
        }
        ByteBuffer trailer = readAt(ch, size - TRAILER, TRAILER);
        first = trailer.getLong();
        long n = trailer.getLong();
        byte[] magic = new byte[MAGIC.length];
        trailer.get(magic);
        if (!java.util.Arrays.equals(magic, MAGIC) || n < 0 || n >= Integer.MAX_VALUE
            || 8 * (n + 1) > size - TRAILER) {
          throw new IOException(p + ": not a row text file (bad trailer)");
        }
        long table = size - TRAILER - 8 * (n + 1);
        ByteBuffer offs = readAt(ch, table, (int) (8 * (n + 1)));
        offsets = new long[(int) n + 1];
        offs.asLongBuffer().get(offsets);
        if (offsets[0] != 0 || offsets[(int) n] != table) {
          throw new IOException(p + ": not a row text file (offsets do not span the texts)");
        }
      }
      in = new DataInputStream(new BufferedInputStream(Files.newInputStream(p), 1 << 16));
    }

    private static ByteBuffer readAt(FileChannel ch, long position, int length) throws IOException {
      ByteBuffer b = ByteBuffer.allocate(length).order(ByteOrder.LITTLE_ENDIAN);
      while (b.hasRemaining()) {
        if (ch.read(b, position + b.position()) < 0) {
          throw new IOException("unexpected end of file");
        }
      }
      b.flip();
      return b;
    }

    @Override
    protected void readNext() throws IOException, NoSuchElementException {
      if (next >= offsets.length - 1) {
        atEOF = true;
        throw new NoSuchElementException();
      }
      long length = offsets[next + 1] - offsets[next];
      if (length < 0 || length > Integer.MAX_VALUE) {
        throw new IOException(path + ": bad length of text " + next);
      }
      if (buffer.length < length) {
        buffer = new byte[(int) Math.max(length, 2L * buffer.length)];
      }
      ((DataInputStream) in).readFully(buffer, 0, (int) length);
      bufferedRecord = new Document(Long.toString(first + next), new String(buffer, 0, (int) length, StandardCharsets.UTF_8));
      next++;
    }

    @Override
    public void close() {
      super.close();
      try {
        in.close();
      } catch (IOException e) {
        // closing a read-only file
      }
    }
  }

  /** One ".slices" file: the texts of its entries read from the store's memory-mapped Arrow file. */
  public static final class SliceSegment extends FileSegment<SourceDocument> {
    static final byte[] SLICE_MAGIC = "QASLICE1".getBytes(StandardCharsets.US_ASCII);
    private final FileChannel store;
    private final long[][] entries;
    private int entry = -1;
    private int next;
    private long count;
    private long first;
    private ByteBuffer titleOffsets, titleData, textOffsets, textData;
    private byte[] buffer = new byte[1 << 12];

    SliceSegment(Path p) throws IOException {
      super(p);
      ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(p)).order(ByteOrder.LITTLE_ENDIAN);
      byte[] magic = new byte[SLICE_MAGIC.length];
      try {
        b.get(magic);
        if (!java.util.Arrays.equals(magic, SLICE_MAGIC)) {
          throw new IOException(p + ": not a slices file (bad magic)");
        }
        byte[] name = new byte[b.getInt()];
        b.get(name);
        long n = b.getLong();
        if (n < 0 || n > b.remaining() / 72) {
          throw new IOException(p + ": not a slices file (bad entry count)");
        }
        entries = new long[(int) n][9];
        for (long[] e : entries) {
          for (int i = 0; i < 9; i++) {
            e[i] = b.getLong();
          }
        }
        store = FileChannel.open(Path.of(new String(name, StandardCharsets.UTF_8)), StandardOpenOption.READ);
      } catch (java.nio.BufferUnderflowException e) {
        throw new IOException(p + ": not a slices file (truncated)");
      }
    }

    private ByteBuffer map(long position, long length) throws IOException {
      if (position < 0 || length < 0 || length > Integer.MAX_VALUE || position + length > store.size()) {
        throw new IOException(path + ": a slice lies outside " + store.size() + "-byte store file");
      }
      return store.map(FileChannel.MapMode.READ_ONLY, position, length).order(ByteOrder.LITTLE_ENDIAN);
    }

    private boolean nextEntry() throws IOException {
      entry++;
      if (entry >= entries.length) {
        return false;
      }
      long[] e = entries[entry];
      first = e[0];
      next = (int) e[1];
      count = e[2];
      if (next < 0 || count < 0 || next + count > Integer.MAX_VALUE / 4 - 1) {
        throw new IOException(path + ": bad slice " + entry);
      }
      long offsetBytes = 4L * (next + count + 1);
      titleOffsets = e[3] < 0 ? null : map(e[3], offsetBytes);
      titleData = e[3] < 0 ? null : map(e[4], e[5]);
      textOffsets = map(e[6], offsetBytes);
      textData = map(e[7], e[8]);
      return true;
    }

    /** Copies string i of a column into buffer at pos, returning its length (bounds checked). */
    private int copy(ByteBuffer offsets, ByteBuffer data, int i, int pos) throws IOException {
      int lo = offsets.getInt(4 * i);
      int hi = offsets.getInt(4 * i + 4);
      if (lo < 0 || hi < lo || hi > data.capacity()) {
        throw new IOException(path + ": bad offsets in slice " + entry + " at " + i);
      }
      int length = hi - lo;
      if (buffer.length < pos + length + 1) {
        buffer = java.util.Arrays.copyOf(buffer, Math.max(pos + length + 1, 2 * buffer.length));
      }
      data.position(lo);
      data.get(buffer, pos, length);
      return length;
    }

    @Override
    protected void readNext() throws IOException, NoSuchElementException {
      while (entry < 0 || next >= entries[entry][1] + count) {
        if (!nextEntry()) {
          atEOF = true;
          throw new NoSuchElementException();
        }
      }
      int length = 0;
      if (titleOffsets != null) {
        length = copy(titleOffsets, titleData, next, 0);
        if (length > 0) {
          buffer[length++] = '\n';
        }
      }
      length += copy(textOffsets, textData, next, length);
      long row = first + next - entries[entry][1];
      bufferedRecord = new Document(Long.toString(row), new String(buffer, 0, length, StandardCharsets.UTF_8));
      next++;
    }

    @Override
    public void close() {
      super.close();
      try {
        store.close();
      } catch (IOException e) {
        // closing a read-only file
      }
    }
  }

  /** A document: id (the corpus row) and contents. */
  public static final class Document implements SourceDocument {
    private final String id;
    private final String contents;

    Document(String id, String contents) {
      this.id = id;
      this.contents = contents;
    }

    @Override
    public String id() {
      return id;
    }

    @Override
    public String contents() {
      return contents;
    }

    @Override
    public String raw() {
      return contents;
    }

    @Override
    public boolean indexable() {
      return true;
    }
  }
}
