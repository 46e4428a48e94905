package testbed.flink.traffic;

import java.util.Map;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import testbed.flink.jobs.CountingFilter;
import testbed.flink.jobs.FlatJson;
import testbed.flink.jobs.RecordCost;
import testbed.flink.jobs.WindowLedger;

/** Traffic Monitoring's stages around the window: deserialise, the radius filter, the enrichment. */
final class Stages {
    private Stages() {}

    /** JSON -> TrafficEvent; every report pays the record cost here (the job's per-record work). */
    static final class Parse extends RichMapFunction<String, TrafficEvent> {
        private static final long serialVersionUID = 1L;
        private final RecordCost cost;

        Parse(RecordCost cost) {
            this.cost = cost;
        }

        @Override
        public void open(OpenContext openContext) {
            cost.open(getRuntimeContext().getMetricGroup());
        }

        @Override
        public TrafficEvent map(String json) {
            Map<String, String> f = FlatJson.parse(json);
            TrafficEvent e = new TrafficEvent();
            e.lp = f.get("lp");
            e.lt = Double.parseDouble(f.get("lt"));
            e.lg = Double.parseDouble(f.get("lg"));
            e.ts = Long.parseLong(f.get("ts"));
            cost.pay(e.ts ^ e.lp.hashCode());
            return e;
        }
    }

    /** Reports within radiusM of the point of interest (geodesic distance); the rest are counted (droppedRecords). */
    static final class RadiusFilter extends CountingFilter<TrafficEvent> {
        private static final long serialVersionUID = 1L;
        private final double radiusM;

        RadiusFilter(double radiusM) {
            this.radiusM = radiusM;
        }

        @Override
        protected boolean keeps(TrafficEvent e) {
            return Geodesic.distance(VehicleEvents.CENTER_LAT, VehicleEvents.CENTER_LON, e.lt, e.lg) <= radiusM;
        }
    }

    /** The published job's enrichment: the result as a JSON-like line (what it writes to Kafka). */
    static final class Enrich implements MapFunction<VehicleSpeed, Enriched> {
        private static final long serialVersionUID = 1L;

        @Override
        public Enriched map(VehicleSpeed s) {
            String line = String.format(java.util.Locale.ROOT, "{ts: %d, lp: '%s', lat: %f, long: %f, avgSpeed: %d}",
                    s.windowEnd, s.lp, s.lt, s.lg, s.avgSpeed);
            return new Enriched(line, s.events);
        }
    }

    /** An enriched result and the reports its window admitted. */
    public static class Enriched {
        public String line;
        public long events;

        public Enriched() {}

        Enriched(String line, long events) {
            this.line = line;
            this.events = events;
        }
    }

    /** The results' reports add up to what the windows admitted. */
    static final class Ledger extends WindowLedger<Enriched> {
        private static final long serialVersionUID = 1L;

        @Override
        protected long records(Enriched result) {
            return result.events;
        }
    }
}
