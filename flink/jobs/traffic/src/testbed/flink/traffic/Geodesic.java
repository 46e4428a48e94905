package testbed.flink.traffic;

/**
 * The distance in metres between two points on the WGS84 ellipsoid by Vincenty's inverse method
 * (iterated until the longitude difference on the auxiliary sphere changes by less than 1e-12), what
 * the published job's geodesic library computes for its radius filter and its speeds.
 */
public final class Geodesic {
    private static final double A = 6378137.0;
    private static final double F = 1 / 298.257223563;
    private static final double B = A * (1 - F);

    private Geodesic() {}

    public static double distance(double lat1, double lon1, double lat2, double lon2) {
        double l = Math.toRadians(lon2 - lon1);
        double u1 = Math.atan((1 - F) * Math.tan(Math.toRadians(lat1)));
        double u2 = Math.atan((1 - F) * Math.tan(Math.toRadians(lat2)));
        double sinU1 = Math.sin(u1), cosU1 = Math.cos(u1), sinU2 = Math.sin(u2), cosU2 = Math.cos(u2);
        double lambda = l, sigma = 0, sinSigma = 0, cosSigma = 1, cos2Alpha = 1, cos2SigmaM = 0;
        for (int i = 0; i < 200; i++) {
            double sinLambda = Math.sin(lambda), cosLambda = Math.cos(lambda);
            double a = cosU2 * sinLambda, b = cosU1 * sinU2 - sinU1 * cosU2 * cosLambda;
            sinSigma = Math.sqrt(a * a + b * b);
            if (sinSigma == 0) {
                return 0.0; // the same point
            }
            cosSigma = sinU1 * sinU2 + cosU1 * cosU2 * cosLambda;
            sigma = Math.atan2(sinSigma, cosSigma);
            double sinAlpha = cosU1 * cosU2 * sinLambda / sinSigma;
            cos2Alpha = 1 - sinAlpha * sinAlpha;
            cos2SigmaM = cos2Alpha == 0 ? 0 : cosSigma - 2 * sinU1 * sinU2 / cos2Alpha;
            double c = F / 16 * cos2Alpha * (4 + F * (4 - 3 * cos2Alpha));
            double previous = lambda;
            lambda = l + (1 - c) * F * sinAlpha
                    * (sigma + c * sinSigma * (cos2SigmaM + c * cosSigma * (-1 + 2 * cos2SigmaM * cos2SigmaM)));
            if (Math.abs(lambda - previous) < 1e-12) {
                break;
            }
        }
        double uSq = cos2Alpha * (A * A - B * B) / (B * B);
        double bigA = 1 + uSq / 16384 * (4096 + uSq * (-768 + uSq * (320 - 175 * uSq)));
        double bigB = uSq / 1024 * (256 + uSq * (-128 + uSq * (74 - 47 * uSq)));
        double deltaSigma = bigB * sinSigma * (cos2SigmaM + bigB / 4 * (cosSigma * (-1 + 2 * cos2SigmaM * cos2SigmaM)
                - bigB / 6 * cos2SigmaM * (-3 + 4 * sinSigma * sinSigma) * (-3 + 4 * cos2SigmaM * cos2SigmaM)));
        return B * bigA * (sigma - deltaSigma);
    }
}
