package testbed.flink.wordcount;

import java.util.List;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A source that follows a rate schedule and survives restarts: its position (records emitted) is
 * checkpointed, so after a restart it replays from the checkpoint and then emits the backlog
 * (due - emitted) as fast as downstream takes it. Run it at parallelism 1 (one split). Record k is
 * the factory's; with eventTime each record carries its scheduled time as its timestamp and the
 * source emits watermarks (ScheduleReader), for jobs with event-time windows.
 */
public final class ScheduledSource<T> implements Source<T, ScheduledSplit, List<ScheduledSplit>>, ResultTypeQueryable<T> {
    private static final long serialVersionUID = 1L;
    private final RateSchedule schedule;
    private final RecordFactory<T> records;
    private final String ledgerPath; // the EmissionLedger's file (null: replays not counted)
    private final boolean eventTime;
    private final TypeInformation<T> type; // what the records are: erased from the factory, so given

    public ScheduledSource(RateSchedule schedule, RecordFactory<T> records, TypeInformation<T> type, String ledgerPath,
                           boolean eventTime) {
        this.schedule = schedule;
        this.type = type;
        this.records = records;
        this.ledgerPath = ledgerPath;
        this.eventTime = eventTime;
    }

    @Override
    public TypeInformation<T> getProducedType() {
        return type;
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.CONTINUOUS_UNBOUNDED;
    }

    @Override
    public SplitEnumerator<ScheduledSplit, List<ScheduledSplit>> createEnumerator(
            SplitEnumeratorContext<ScheduledSplit> context) {
        return new ScheduleEnumerator(context, List.of(new ScheduledSplit(System.currentTimeMillis(), 0)));
    }

    @Override
    public SplitEnumerator<ScheduledSplit, List<ScheduledSplit>> restoreEnumerator(
            SplitEnumeratorContext<ScheduledSplit> context, List<ScheduledSplit> checkpoint) {
        return new ScheduleEnumerator(context, checkpoint);
    }

    @Override
    public SimpleVersionedSerializer<ScheduledSplit> getSplitSerializer() {
        return new SplitSerializers.Split();
    }

    @Override
    public SimpleVersionedSerializer<List<ScheduledSplit>> getEnumeratorCheckpointSerializer() {
        return new SplitSerializers.Pending();
    }

    @Override
    public SourceReader<T, ScheduledSplit> createReader(SourceReaderContext context) {
        return new ScheduleReader<>(context, schedule, records, ledgerPath, eventTime);
    }
}
