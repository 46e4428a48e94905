package testbed.flink.wordcount;

import org.apache.flink.api.connector.source.SourceSplit;

/** The one split of the scheduled source: when the schedule started, and how far it has emitted. */
public final class ScheduledSplit implements SourceSplit {
    public final long startMs; // wall clock of the schedule's time 0 (the job's first start)
    public long emitted; // records emitted (in a checkpoint: committed) so far

    public ScheduledSplit(long startMs, long emitted) {
        this.startMs = startMs;
        this.emitted = emitted;
    }

    @Override
    public String splitId() {
        return "schedule";
    }

    public ScheduledSplit copy() {
        return new ScheduledSplit(startMs, emitted);
    }
}
