package testbed.flink.jobs;

/** Event-time tumbling windows as Flink's assigner places them (offset 0): [start, start + size). */
public final class TumblingWindows {
    private TumblingWindows() {}

    /** The end (exclusive) of the window of size ms that holds timestamp ts. */
    public static long endOf(long ts, long size) {
        return ts - Math.floorMod(ts, size) + size;
    }
}
