package testbed.flink.ysb;

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
 * The Yahoo Streaming Benchmark as the Daedalus paper ran it: JSON ad events -> deserialise ->
 * filter (views) -> projection (ad, event time) -> join with the ad's campaign -> views per campaign
 * in 10 s tumbling event-time windows -> sink. The source follows the rate schedule (parallelism 1,
 * as WordCount's); every later stage scales with the cluster. Arguments: --schedule FILE, --seed (1),
 * --campaigns (100), --ads-per-campaign (10), --window-ms (10000), --work-rounds and --wait-us (the
 * cost each event pays at deserialisation), --ledger FILE.
 */
public final class YsbJob {
    public static void main(String[] args) throws Exception {
        ParameterTool params = ParameterTool.fromArgs(args);
        RateSchedule schedule = RateSchedule.read(Path.of(params.getRequired("schedule")));
        AdEvents events = new AdEvents(params.getLong("seed", 1), params.getInt("campaigns", 100),
                params.getInt("ads-per-campaign", 10));
        RecordCost cost = new RecordCost(params.getLong("work-rounds", 0), params.getLong("wait-us", 0));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.fromSource(new ScheduledSource<>(schedule, events, Types.STRING, params.get("ledger"), true),
                        WatermarkStrategy.<String>noWatermarks(), "source")
                .setParallelism(1).setMaxParallelism(1).uid("source")
                .rebalance()
                // a chain of its own, not the source's, so that everything after the source scales with the cluster
                .map(new Stages.Parse(cost)).name("parse").uid("parse").startNewChain()
                .filter(new Stages.ViewFilter()).name("filter").uid("filter")
                .map(new Stages.Project()).name("project").uid("project")
                .map(new Stages.CampaignJoin(events)).name("join").uid("join")
                .keyBy(v -> v.campaignId)
                .process(new CampaignWindow(params.getLong("window-ms", 10_000))).name("count").uid("count")
                .process(new Stages.Ledger()).name("sink").uid("sink")
                .sinkTo(new DiscardingSink<>()).name("discard").uid("discard");
        env.execute("testbed-ysb");
    }
}
