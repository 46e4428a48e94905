package testbed.flink.jobs;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFilterFunction;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;

/**
 * A filter whose dropped records are counted in operator state (gauge droppedRecords), so that
 * every source record is accounted for: either admitted downstream or counted here exactly once.
 */
public abstract class CountingFilter<T> extends RichFilterFunction<T> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private final OperatorCount dropped = new OperatorCount("droppedRecords");

    /** Whether the record goes on. */
    protected abstract boolean keeps(T record);

    @Override
    public final void open(OpenContext openContext) {
        dropped.register(getRuntimeContext().getMetricGroup());
    }

    @Override
    public final boolean filter(T record) {
        boolean keep = keeps(record);
        if (!keep) {
            dropped.add(1);
        }
        return keep;
    }

    @Override
    public final void snapshotState(FunctionSnapshotContext context) throws Exception {
        dropped.snapshot();
    }

    @Override
    public final void initializeState(FunctionInitializationContext context) throws Exception {
        dropped.initialize(context);
    }
}
