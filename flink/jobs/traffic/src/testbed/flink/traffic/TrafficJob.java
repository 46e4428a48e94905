package testbed.flink.traffic;

import java.nio.file.Path;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.ParameterTool;
import testbed.flink.jobs.RecordCost;
import testbed.flink.wordcount.RateSchedule;
import testbed.flink.wordcount.ScheduledSource;

/**
 * Traffic Monitoring as the Daedalus paper ran it: JSON vehicle reports -> deserialise -> the
 * reports within a radius of a point of interest -> per vehicle, the mean speed in 10 s tumbling
 * event-time windows -> enrich -> sink. The source follows the rate schedule (parallelism 1, as
 * WordCount's); every later stage scales with the cluster. Arguments: --schedule FILE, --seed (1),
 * --vehicles (1000), --report-interval-s (1), --radius-m (1000), --window-ms (10000), --work-rounds
 * and --wait-us (the cost each report pays at deserialisation), --ledger FILE.
 */
public final class TrafficJob {
    public static void main(String[] args) throws Exception {
        ParameterTool params = ParameterTool.fromArgs(args);
        RateSchedule schedule = RateSchedule.read(Path.of(params.getRequired("schedule")));
        double interval = params.getDouble("report-interval-s", 1.0);
        VehicleEvents events = new VehicleEvents(params.getLong("seed", 1), params.getInt("vehicles", 1000), interval);
        RecordCost cost = new RecordCost(params.getLong("work-rounds", 0), params.getLong("wait-us", 0));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.fromSource(new ScheduledSource<>(schedule, events, Types.STRING, params.get("ledger"), true),
                        WatermarkStrategy.<String>noWatermarks(), "source")
                .setParallelism(1).setMaxParallelism(1).uid("source")
                .rebalance()
                // a chain of its own, not the source's, so that everything after the source scales with the cluster
                .map(new Stages.Parse(cost)).name("parse").uid("parse").startNewChain()
                .filter(new Stages.RadiusFilter(params.getDouble("radius-m", 1000.0))).name("filter").uid("filter")
                .keyBy(e -> e.lp)
                .process(new SpeedWindow(params.getLong("window-ms", 10_000), interval)).name("speed").uid("speed")
                .map(new Stages.Enrich()).name("enrich").uid("enrich")
                .process(new Stages.Ledger()).name("sink").uid("sink")
                .sinkTo(new DiscardingSink<>()).name("discard").uid("discard");
        env.execute("testbed-traffic");
    }
}
