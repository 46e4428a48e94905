package testbed.flink.jobs;

import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import org.apache.flink.metrics.MetricGroup;
import testbed.flink.wordcount.WordWork;

/**
 * What one record costs the operator that pays it, to give a TaskManager a chosen capacity: rounds
 * of WordWork's computation (the cpu mode: under a CPU limit, CPU is what limits it), or a wait (the
 * wait mode, as for a call to an external service: a TaskManager then carries 1e6 / waitMicros
 * records/s whatever the machine's cores). The wait is paid in parks of at least 1 ms, each one's
 * overshoot counted against the next. Every 256th record's work is timed in the thread's CPU time
 * (gauge workNanosPerWord, the mean of this attempt's samples), so a run records what it cost.
 */
public final class RecordCost implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final int SAMPLE_EVERY = 256;
    private final long workRounds;
    private final long waitNanos;
    private transient ThreadMXBean threads;
    private transient long waitDebtNanos;
    private transient long workSink;
    private transient long paid;
    private transient long sampledNanos;
    private transient long sampledRecords;

    public RecordCost(long workRounds, long waitMicros) {
        this.workRounds = workRounds;
        this.waitNanos = waitMicros * 1000L;
    }

    /** Call from the operator's open(): the gauges of what the work cost. */
    public void open(MetricGroup metrics) {
        threads = ManagementFactory.getThreadMXBean();
        metrics.gauge("workNanosPerWord", () -> sampledRecords == 0 ? Double.NaN : (double) sampledNanos / sampledRecords);
        metrics.gauge("workSink", () -> workSink & 1L);  // the work's result is used: the JIT keeps it
    }

    /** One record's cost; seed varies the work's input (the JIT cannot fold it). */
    public void pay(long seed) {
        paid++;
        if (workRounds > 0) {
            work(seed);
        }
        if (waitNanos > 0) {
            waitDebtNanos += waitNanos;
            if (waitDebtNanos >= 1_000_000L) {
                long start = System.nanoTime();
                java.util.concurrent.locks.LockSupport.parkNanos(waitDebtNanos);
                waitDebtNanos -= System.nanoTime() - start;
            }
        }
    }

    private void work(long seed) {
        if (paid % SAMPLE_EVERY != 0) {
            workSink ^= WordWork.spin(seed, workRounds);
            return;
        }
        long start = threads.getCurrentThreadCpuTime();
        workSink ^= WordWork.spin(seed, workRounds);
        sampledNanos += threads.getCurrentThreadCpuTime() - start;
        sampledRecords++;
    }
}
