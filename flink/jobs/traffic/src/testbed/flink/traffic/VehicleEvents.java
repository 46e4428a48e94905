package testbed.flink.traffic;

import java.util.SplittableRandom;
import testbed.flink.wordcount.RecordFactory;

/**
 * Vehicle position reports around a point of interest (the published job's, in Berlin): vehicles
 * drive round circles about it of radius 100-2,000 m (drawn per vehicle, so about half stay within
 * the job's 1,000 m filter) at 20-60 km/h, each reporting every intervalS seconds of its own time.
 * Record k is report k / vehicles of vehicle k % vehicles: its plate, position and the time the
 * schedule had it due, as flat JSON. A function of (seed, k), so a replay emits the same reports.
 */
public final class VehicleEvents implements RecordFactory<String> {
    private static final long serialVersionUID = 1L;
    static final double CENTER_LAT = 52.51623;
    static final double CENTER_LON = 13.38532;
    private static final double METRES_PER_DEGREE = 111_320.0;
    private final double intervalS;
    private final String[] plates;
    private final double[] radius;
    private final double[] phase;
    private final double[] speed; // m/s

    public VehicleEvents(long seed, int vehicles, double intervalS) {
        this.intervalS = intervalS;
        SplittableRandom random = new SplittableRandom(seed);
        plates = new String[vehicles];
        radius = new double[vehicles];
        phase = new double[vehicles];
        speed = new double[vehicles];
        for (int v = 0; v < vehicles; v++) {
            plates[v] = String.format(java.util.Locale.ROOT, "B-%c%c %04d", (char) ('A' + random.nextInt(26)),
                    (char) ('A' + random.nextInt(26)), v);
            radius[v] = random.nextDouble(100.0, 2000.0);
            phase[v] = random.nextDouble(0.0, 2 * Math.PI);
            speed[v] = random.nextDouble(20.0, 60.0) / 3.6;
        }
    }

    @Override
    public String make(long k, long scheduledMs) {
        int v = (int) (k % plates.length);
        long report = k / plates.length;
        double angle = phase[v] + speed[v] * report * intervalS / radius[v];
        double lat = CENTER_LAT + radius[v] * Math.cos(angle) / METRES_PER_DEGREE;
        double lon = CENTER_LON + radius[v] * Math.sin(angle) / (METRES_PER_DEGREE * Math.cos(Math.toRadians(CENTER_LAT)));
        return String.format(java.util.Locale.ROOT, "{\"lp\":\"%s\",\"lt\":%.7f,\"lg\":%.7f,\"ts\":%d}",
                plates[v], lat, lon, scheduledMs);
    }
}
