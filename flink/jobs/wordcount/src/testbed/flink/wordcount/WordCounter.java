package testbed.flink.wordcount;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import testbed.flink.jobs.Latency;
import testbed.flink.jobs.OperatorCount;
import testbed.flink.jobs.RecordCost;

/**
 * The running count per word (keyed state). Beside it, each subtask keeps the number of words its
 * keyed state has counted in operator state (gauge countedWords, an OperatorCount): summed over
 * subtasks it is the total of all counts, so a replay after a restart that counted twice would show
 * as a total above the words emitted. Latency (processing time - the sentence's scheduled time) goes
 * to latencyMs and latencySumMs. Each word pays the RecordCost (CPU work rounds or a wait), so that a
 * TaskManager's capacity can be set below what the one source emits.
 */
public final class WordCounter extends KeyedProcessFunction<String, Word, Long> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private final RecordCost cost;
    private final OperatorCount counted = new OperatorCount("countedWords");
    private transient ValueState<Long> count;
    private transient Latency latency;

    public WordCounter(long workRounds, long waitMicros) {
        this.cost = new RecordCost(workRounds, waitMicros);
    }

    @Override
    public void open(OpenContext openContext) {
        count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Long.class));
        var metrics = getRuntimeContext().getMetricGroup();
        counted.register(metrics);
        cost.open(metrics);
        latency = new Latency(metrics);
    }

    @Override
    public void processElement(Word word, Context ctx, Collector<Long> out) throws Exception {
        cost.pay(word.word.hashCode());
        Long c = count.value();
        count.update(c == null ? 1L : c + 1);
        counted.add(1);
        latency.record(word.scheduledMs);
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        counted.snapshot();
    }

    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        counted.initialize(context);
    }
}
