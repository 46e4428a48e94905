package testbed.flink.wordcount;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.metrics.groups.SourceReaderMetricGroup;

/**
 * Emits record k of the schedule once its time has come, in order, never skipping: what is due
 * and not yet emitted is the backlog (metric pendingRecords, the consumer lag), emitted in batches
 * as fast as the task's output accepts them. With eventTime, a record's timestamp is its scheduled
 * time and the watermark after each poll is just below the next record's scheduled time (or now,
 * if that lies ahead): records leave in the order of their times, so none is ever late, and once
 * the schedule has ended the watermark follows the clock, which closes the last windows.
 */
final class ScheduleReader<T> implements SourceReader<T, ScheduledSplit> {
    private static final int BATCH = 256; // records per poll: returns to the mailbox for checkpoints
    private static final long MAX_WAIT_MS = 20; // idle poll interval cap, bounds the added latency
    private final SourceReaderContext context;
    private final RateSchedule schedule;
    private final RecordFactory<T> records;
    private final String ledgerPath; // null: replays not counted
    private final boolean eventTime;
    private long watermark = Long.MIN_VALUE;
    private EmissionLedger ledger;
    private ScheduledSplit split;
    private CompletableFuture<Void> splitArrived = new CompletableFuture<>();

    ScheduleReader(SourceReaderContext context, RateSchedule schedule, RecordFactory<T> records, String ledgerPath,
                   boolean eventTime) {
        this.context = context;
        this.schedule = schedule;
        this.records = records;
        this.ledgerPath = ledgerPath;
        this.eventTime = eventTime;
    }

    @Override
    public void start() {
        SourceReaderMetricGroup metrics = context.metricGroup();
        metrics.setPendingRecordsGauge(() -> split == null ? null : Math.max(0L, due() - split.emitted));
        metrics.gauge("scheduledRecords", () -> split == null ? 0L : due());
        metrics.gauge("emittedRecords", () -> split == null ? 0L : split.emitted);
        metrics.gauge("scheduleStartMs", () -> split == null ? 0L : split.startMs);
        metrics.gauge("replayedRecords", () -> ledger == null ? 0L : ledger.replayed());
        context.sendSplitRequest();
    }

    private long due() {
        return schedule.dueAt((System.currentTimeMillis() - split.startMs) / 1000.0);
    }

    @Override
    public InputStatus pollNext(ReaderOutput<T> output) {
        if (split == null) {
            return InputStatus.NOTHING_AVAILABLE;
        }
        long due = due();
        int n = 0;
        while (split.emitted < due && n < BATCH) {
            long k = split.emitted;
            long at = split.startMs + (long) Math.ceil(schedule.timeOf(k) * 1000.0);
            if (eventTime) {
                output.collect(records.make(k, at), at);
            } else {
                output.collect(records.make(k, at));
            }
            split.emitted = k + 1;
            n++;
        }
        if (ledger != null && n > 0) {
            ledger.emitted(split.emitted);
        }
        if (eventTime) {
            advanceWatermark(output);
        }
        return split.emitted < due ? InputStatus.MORE_AVAILABLE : InputStatus.NOTHING_AVAILABLE;
    }

    private void advanceWatermark(ReaderOutput<T> output) {
        double next = schedule.timeOf(split.emitted);
        long now = System.currentTimeMillis();
        long nextMs = Double.isInfinite(next) ? now : split.startMs + (long) Math.ceil(next * 1000.0);
        long mark = Math.min(now, nextMs) - 1;
        if (mark > watermark) {
            watermark = mark;
            output.emitWatermark(new Watermark(mark));
        }
    }

    @Override
    public CompletableFuture<Void> isAvailable() {
        if (split == null) {
            return splitArrived;
        }
        double next = schedule.timeOf(split.emitted);
        long untilNext = Double.isInfinite(next) ? MAX_WAIT_MS
                : split.startMs + (long) Math.ceil(next * 1000.0) - System.currentTimeMillis();
        long wait = Math.max(1, Math.min(MAX_WAIT_MS, untilNext));
        return CompletableFuture.runAsync(() -> {}, CompletableFuture.delayedExecutor(wait, TimeUnit.MILLISECONDS));
    }

    @Override
    public List<ScheduledSplit> snapshotState(long checkpointId) {
        List<ScheduledSplit> state = new ArrayList<>(1);
        if (split != null) {
            state.add(split.copy());
        }
        return state;
    }

    @Override
    public void addSplits(List<ScheduledSplit> splits) {
        if (splits.isEmpty()) {
            return;
        }
        if (split != null || splits.size() > 1) {
            throw new IllegalStateException("the scheduled source has exactly one split; run it at parallelism 1");
        }
        split = splits.get(0).copy();
        if (ledgerPath != null) {
            ledger = new EmissionLedger(ledgerPath);
            ledger.resume(split.emitted);
        }
        splitArrived.complete(null);
    }

    @Override
    public void notifyNoMoreSplits() {}

    @Override
    public void close() throws Exception {
        if (ledger != null) {
            ledger.close();
        }
    }
}
