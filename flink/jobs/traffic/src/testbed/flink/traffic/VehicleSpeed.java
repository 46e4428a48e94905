package testbed.flink.traffic;

/** One window's result: a vehicle's mean speed (km/h) and last position; events = reports it admitted. */
public class VehicleSpeed {
    public long windowEnd;
    public String lp;
    public double lt;
    public double lg;
    public int avgSpeed;
    public long events;

    public VehicleSpeed() {}
}
