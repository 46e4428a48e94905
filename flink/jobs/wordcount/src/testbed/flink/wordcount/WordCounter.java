package testbed.flink.wordcount;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.metrics.Counter;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * The running count per word (keyed state). Beside it, each subtask keeps the number of words its
 * keyed state has counted in operator state (gauge countedWords), checkpointed with the counts and
 * redistributed on rescaling without loss: summed over subtasks it is the total of all counts, so
 * a replay after a restart that counted twice would show as a total above the words emitted.
 * Latency (processing time - the sentence's scheduled time) goes to latencyMs and latencySumMs.
 * workRounds rounds of WordWork's computation are done per word (0: none), so that a TaskManager's
 * capacity can be set below what the one source emits and, under a CPU limit, CPU is what limits it;
 * every 256th word's work is timed in the thread's CPU time (gauge workNanosPerWord, the mean of this
 * attempt's samples), so a run records what a word cost. waitMicros per word are waited instead (as for a call
 * to an external service): a TaskManager's capacity is then 1e6 / waitMicros words/s whatever the
 * machine's cores, which is what lets several TaskManagers on a small machine add capacity. The wait
 * is paid in parks of at least 1 ms, each one's overshoot counted against the next.
 */
public final class WordCounter extends KeyedProcessFunction<String, Word, Long> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private static final int SAMPLE_EVERY = 256;
    private final long workRounds;
    private final long waitNanos;
    private transient long waitDebtNanos;
    private transient ThreadMXBean threads;
    private transient long workSink;
    private transient long sampledNanos;
    private transient long sampledWords;
    private transient ValueState<Long> count;
    private transient ListState<Long> countedState;
    private transient long counted;
    private transient WindowHistogram latency;
    private transient Counter latencySum;

    public WordCounter(long workRounds, long waitMicros) {
        this.workRounds = workRounds;
        this.waitNanos = waitMicros * 1000L;
    }

    @Override
    public void open(OpenContext openContext) {
        threads = ManagementFactory.getThreadMXBean();
        count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Long.class));
        var metrics = getRuntimeContext().getMetricGroup();
        metrics.gauge("countedWords", () -> counted);
        metrics.gauge("workNanosPerWord", () -> sampledWords == 0 ? Double.NaN : (double) sampledNanos / sampledWords);
        metrics.gauge("workSink", () -> workSink & 1L);  // the work's result is used: the JIT keeps it
        latency = metrics.histogram("latencyMs", new WindowHistogram(2048));
        latencySum = metrics.counter("latencySumMs");
    }

    @Override
    public void processElement(Word word, Context ctx, Collector<Long> out) throws Exception {
        if (workRounds > 0) {
            work(word.word.hashCode());
        }
        if (waitNanos > 0) {
            waitDebtNanos += waitNanos;
            if (waitDebtNanos >= 1_000_000L) {
                long start = System.nanoTime();
                java.util.concurrent.locks.LockSupport.parkNanos(waitDebtNanos);
                waitDebtNanos -= System.nanoTime() - start;
            }
        }
        Long c = count.value();
        count.update(c == null ? 1L : c + 1);
        counted++;
        long ms = Math.max(0, System.currentTimeMillis() - word.scheduledMs);
        latency.update(ms);
        latencySum.inc(ms);
    }

    private void work(long seed) {
        if ((counted + 1) % SAMPLE_EVERY != 0) {
            workSink ^= WordWork.spin(seed, workRounds);
            return;
        }
        long start = threads.getCurrentThreadCpuTime();
        workSink ^= WordWork.spin(seed, workRounds);
        sampledNanos += threads.getCurrentThreadCpuTime() - start;
        sampledWords++;
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        countedState.update(java.util.List.of(counted));
    }

    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        countedState = context.getOperatorStateStore().getListState(new ListStateDescriptor<>("counted", Long.class));
        counted = 0;
        for (Long c : countedState.get()) {
            counted += c;
        }
    }
}
