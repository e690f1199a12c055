// Compile-time stand-in for Anserini's interface (its jar is Java 21 bytecode, which a JDK < 21's javac cannot
// read); never compiled into the helper: the real class from the Anserini jar is the one loaded at run time.
package io.anserini.collection;

public interface SourceDocument {
  String id();

  String contents();

  String raw();

  boolean indexable();
}
