package testbed.flink.jobs;

import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import testbed.flink.wordcount.WindowHistogram;

/**
 * Latency = processing time - the record's scheduled time (it includes the backlog's waiting, as the
 * paper's does): histogram latencyMs over the last 2,048 records and counter latencySumMs, whose
 * difference between two readings over the records processed meanwhile is their mean.
 */
public final class Latency {
    private final WindowHistogram histogram;
    private final Counter sum;

    public Latency(MetricGroup metrics) {
        histogram = metrics.histogram("latencyMs", new WindowHistogram(2048));
        sum = metrics.counter("latencySumMs");
    }

    public void record(long scheduledMs) {
        long ms = Math.max(0, System.currentTimeMillis() - scheduledMs);
        histogram.update(ms);
        sum.inc(ms);
    }
}
