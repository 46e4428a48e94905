package testbed.flink.wordcount;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;

/**
 * The CPU work a word costs in the CPU mode: a fixed number of rounds of a 64-bit mixing function
 * seeded by the word, each round depending on the last, so that the JIT can neither skip nor
 * vectorise it. The same rounds cost the same work wherever they run; what a round takes in CPU time
 * on this machine is measured by main (the calibration the cluster runs before the job starts).
 */
public final class WordWork {
    private WordWork() {}

    /** rounds of the mixing function from seed; the result must be used, else the work may vanish. */
    public static long spin(long seed, long rounds) {
        long x = seed;
        for (long i = 0; i < rounds; i++) {
            x = (x ^ (x >>> 31)) * 0x9E3779B97F4A7C15L + i;
        }
        return x;
    }

    /**
     * Prints "ns_per_round=X min=Y max=Z": the median, lowest and highest over trials of the thread's
     * CPU time per round after a warm-up, in CPU time so that other processes on the machine do not
     * inflate it.
     */
    public static void main(String[] args) {
        int trials = Integer.parseInt(arg(args, "--trials", "7"));
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long sink = 0;
        long chunk = 1_000_000L;
        for (int i = 0; i < 40; i++) {  // warm-up: let the JIT compile spin as the job will run it
            sink ^= spin(i, chunk);
        }
        double[] perRound = new double[trials];
        for (int t = 0; t < trials; t++) {
            long start = threads.getCurrentThreadCpuTime();
            sink ^= spin(t, 20 * chunk);
            perRound[t] = (threads.getCurrentThreadCpuTime() - start) / (20.0 * chunk);
        }
        Arrays.sort(perRound);
        double ns = perRound[trials / 2];
        System.out.printf(java.util.Locale.ROOT, "ns_per_round=%.6f min=%.6f max=%.6f sink=%d%n", ns,
                perRound[0], perRound[trials - 1], sink & 1);
    }

    private static String arg(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }
}
