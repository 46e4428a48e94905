package testbed.flink.traffic;

/** A parsed vehicle report: plate, position (degrees) and time (ms). */
public class TrafficEvent {
    public String lp;
    public double lt;
    public double lg;
    public long ts;

    public TrafficEvent() {}
}
