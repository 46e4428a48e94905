package testbed.flink.wordcount;

import java.util.Arrays;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.HistogramStatistics;

/** A histogram of the last N values (the recent latency distribution), safe to read from the reporter. */
public final class WindowHistogram implements Histogram {
    private final long[] window;
    private long count;

    public WindowHistogram(int size) {
        window = new long[size];
    }

    @Override
    public synchronized void update(long value) {
        window[(int) (count % window.length)] = value;
        count++;
    }

    @Override
    public synchronized long getCount() {
        return count;
    }

    @Override
    public synchronized HistogramStatistics getStatistics() {
        long[] values = Arrays.copyOf(window, (int) Math.min(count, window.length));
        Arrays.sort(values);
        return new Sorted(values);
    }

    private static final class Sorted extends HistogramStatistics {
        private final long[] values;

        Sorted(long[] values) {
            this.values = values;
        }

        @Override
        public double getQuantile(double q) {
            if (values.length == 0) {
                return 0.0;
            }
            int i = (int) Math.min(values.length - 1, Math.max(0, Math.ceil(q * values.length) - 1));
            return values[i];
        }

        @Override
        public long[] getValues() {
            return values.clone();
        }

        @Override
        public int size() {
            return values.length;
        }

        @Override
        public double getMean() {
            return values.length == 0 ? 0.0 : Arrays.stream(values).average().orElse(0.0);
        }

        @Override
        public double getStdDev() {
            double mean = getMean();
            return values.length == 0 ? 0.0
                    : Math.sqrt(Arrays.stream(values).mapToDouble(v -> (v - mean) * (v - mean)).sum() / values.length);
        }

        @Override
        public long getMax() {
            return values.length == 0 ? 0 : values[values.length - 1];
        }

        @Override
        public long getMin() {
            return values.length == 0 ? 0 : values[0];
        }
    }
}
