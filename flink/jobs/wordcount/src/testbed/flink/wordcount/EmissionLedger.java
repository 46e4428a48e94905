package testbed.flink.wordcount;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;

/**
 * What the source emitted across restarts, kept outside Flink's state so that a restart cannot roll
 * it back: the highest position ever emitted and the records emitted again after restarts (a
 * restart resumes at its checkpoint's position, below the highest, and everything up to the highest
 * goes out a second time). A small file that every attempt of the one source subtask shares (the
 * cluster's work directory: one machine), written after each batch, so it survives a TaskManager
 * killed outright; only a batch cut off between its emission and the write is missed.
 */
final class EmissionLedger implements AutoCloseable {
    private final RandomAccessFile file;
    private long highest;
    private long replayed;

    EmissionLedger(String path) {
        try {
            file = new RandomAccessFile(path, "rw");
            if (file.length() >= 16) {
                file.seek(0);
                highest = file.readLong();
                replayed = file.readLong();
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** An attempt resumes at `position`: what lies between it and the highest is emitted again. */
    void resume(long position) {
        replayed += Math.max(0L, highest - position);
        write();
    }

    void emitted(long position) {
        if (position > highest) {
            highest = position;
            write();
        }
    }

    long replayed() {
        return replayed;
    }

    private void write() {
        try {
            file.seek(0);
            file.writeLong(highest);
            file.writeLong(replayed);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public void close() throws IOException {
        file.close();
    }
}
