package testbed.flink.wordcount;

import java.io.IOException;
import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A piecewise-constant rate over time: from times[i] (seconds since the job's first start) the
 * source is due rates[i] records per second, up to times[i + 1]; the last rate holds for ever.
 * File format: one "seconds rate" pair per line, times increasing from 0; '#' starts a comment.
 */
public final class RateSchedule implements Serializable {
    private static final long serialVersionUID = 1L;
    private final double[] times;
    private final double[] rates;
    private final double[] before; // records due before times[i]

    public RateSchedule(double[] times, double[] rates) {
        if (times.length == 0 || times.length != rates.length || times[0] != 0.0) {
            throw new IllegalArgumentException("a rate schedule starts at time 0 and has one rate per time");
        }
        this.times = times.clone();
        this.rates = rates.clone();
        this.before = new double[times.length];
        for (int i = 1; i < times.length; i++) {
            if (!(times[i] > times[i - 1])) {
                throw new IllegalArgumentException("schedule times must increase: " + times[i]);
            }
            before[i] = before[i - 1] + rates[i - 1] * (times[i] - times[i - 1]);
        }
        for (double r : rates) {
            if (!(r >= 0.0) || Double.isInfinite(r)) {
                throw new IllegalArgumentException("schedule rates must be finite and >= 0: " + r);
            }
        }
    }

    public static RateSchedule read(Path path) throws IOException {
        List<double[]> rows = new ArrayList<>();
        for (String line : Files.readAllLines(path)) {
            String s = line.replaceAll("#.*", "").trim();
            if (s.isEmpty()) {
                continue;
            }
            String[] parts = s.split("\\s+");
            if (parts.length != 2) {
                throw new IllegalArgumentException(path + ": expected 'seconds rate', got: " + line);
            }
            rows.add(new double[] {Double.parseDouble(parts[0]), Double.parseDouble(parts[1])});
        }
        double[] t = new double[rows.size()];
        double[] r = new double[rows.size()];
        for (int i = 0; i < rows.size(); i++) {
            t[i] = rows.get(i)[0];
            r[i] = rows.get(i)[1];
        }
        return new RateSchedule(t, r);
    }

    private int segment(double elapsedS) {
        int i = times.length - 1;
        while (i > 0 && times[i] > elapsedS) {
            i--;
        }
        return i;
    }

    /** Records due from the start up to elapsedS seconds (whole records). */
    public long dueAt(double elapsedS) {
        if (elapsedS <= 0) {
            return 0;
        }
        int i = segment(elapsedS);
        return (long) Math.floor(before[i] + rates[i] * (elapsedS - times[i]) + 1e-9);
    }

    /** Seconds since the start at which record k (0-based) is due: when dueAt first exceeds k. */
    public double timeOf(long k) {
        double target = k + 1;
        int i = times.length - 1;
        while (i > 0 && before[i] >= target) {
            i--;
        }
        if (rates[i] == 0.0) {
            return Double.POSITIVE_INFINITY; // never due (the schedule's rate stays 0 after its last record)
        }
        return times[i] + (target - before[i]) / rates[i];
    }
}
