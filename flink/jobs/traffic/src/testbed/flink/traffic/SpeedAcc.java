package testbed.flink.traffic;

/** A vehicle's window so far: its last position, the distance between its reports, how many. */
public class SpeedAcc {
    public double lastLt;
    public double lastLg;
    public double metres;
    public int pairs;
    public long events;

    public SpeedAcc() {}
}
