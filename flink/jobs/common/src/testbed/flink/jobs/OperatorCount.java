package testbed.flink.jobs;

import java.io.Serializable;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.state.FunctionInitializationContext;

/**
 * A count of records an operator has handled, kept in operator state (checkpointed with the
 * operator's other state and redistributed on rescaling without loss) and shown as a gauge: summed
 * over subtasks it is exactly the records of the job's committed history, so a replay after a
 * restart that counted twice would show as a total above the records emitted.
 */
public final class OperatorCount implements Serializable {
    private static final long serialVersionUID = 1L;
    private final String name;
    private transient ListState<Long> state;
    private transient long value;

    public OperatorCount(String name) {
        this.name = name;
    }

    /** From the operator's initializeState: restores what this subtask was given. */
    public void initialize(FunctionInitializationContext context) throws Exception {
        state = context.getOperatorStateStore().getListState(new ListStateDescriptor<>(name, Long.class));
        value = 0;
        for (Long c : state.get()) {
            value += c;
        }
    }

    /** From the operator's open(): the gauge of the same name. */
    public void register(MetricGroup metrics) {
        metrics.gauge(name, () -> value);
    }

    public void add(long n) {
        value += n;
    }

    /** From the operator's snapshotState. */
    public void snapshot() throws Exception {
        state.update(java.util.List.of(value));
    }
}
