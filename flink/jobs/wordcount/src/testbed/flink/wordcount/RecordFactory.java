package testbed.flink.wordcount;

import java.io.Serializable;

/**
 * What the scheduled source emits as record k: a pure function of k and the time the schedule had
 * it due, so that a replay after a restart emits the same records again.
 */
@FunctionalInterface
public interface RecordFactory<T> extends Serializable {
    T make(long k, long scheduledMs);
}
