package testbed.flink.wordcount;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.connector.source.SplitsAssignment;

/**
 * Hands the one split to the one reader. A fresh enumerator (no checkpoint yet) creates the split
 * with the schedule's time 0 = now; a restored one holds only splits a failed reader gave back.
 */
final class ScheduleEnumerator implements SplitEnumerator<ScheduledSplit, List<ScheduledSplit>> {
    private final SplitEnumeratorContext<ScheduledSplit> context;
    private final List<ScheduledSplit> pending;

    ScheduleEnumerator(SplitEnumeratorContext<ScheduledSplit> context, List<ScheduledSplit> pending) {
        this.context = context;
        this.pending = new ArrayList<>(pending);
    }

    @Override
    public void start() {}

    @Override
    public void handleSplitRequest(int subtaskId, String requesterHostname) {
        assignTo(subtaskId);
    }

    @Override
    public void addSplitsBack(List<ScheduledSplit> splits, int subtaskId) {
        pending.addAll(splits);
        if (context.registeredReaders().containsKey(subtaskId)) {
            assignTo(subtaskId);
        }
    }

    @Override
    public void addReader(int subtaskId) {
        assignTo(subtaskId);
    }

    private void assignTo(int subtaskId) {
        if (pending.isEmpty()) {
            return;
        }
        List<ScheduledSplit> splits = new ArrayList<>(pending);
        pending.clear();
        context.assignSplits(new SplitsAssignment<>(Map.of(subtaskId, splits)));
    }

    @Override
    public List<ScheduledSplit> snapshotState(long checkpointId) {
        List<ScheduledSplit> copy = new ArrayList<>();
        for (ScheduledSplit s : pending) {
            copy.add(s.copy());
        }
        return copy;
    }

    @Override
    public void close() {}
}
