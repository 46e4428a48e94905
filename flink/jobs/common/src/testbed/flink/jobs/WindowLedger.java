package testbed.flink.jobs;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;

/**
 * The end of a windowed job: adds up how many records the window results it receives stand for
 * (gauge windowedRecords, an OperatorCount), so that once every window has fired the total equals
 * the records the windows admitted: none lost or counted twice between admission and result. It
 * forwards nothing (the published jobs write the results to Kafka; here they are discarded).
 */
public abstract class WindowLedger<T> extends ProcessFunction<T, T> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private final OperatorCount windowed = new OperatorCount("windowedRecords");

    /** The records a result stands for (e.g. a count per campaign). */
    protected abstract long records(T result);

    @Override
    public void open(OpenContext openContext) {
        windowed.register(getRuntimeContext().getMetricGroup());
    }

    @Override
    public void processElement(T result, Context ctx, Collector<T> out) {
        windowed.add(records(result));
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        windowed.snapshot();
    }

    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        windowed.initialize(context);
    }
}
